"""Retrieval benchmark: quality on the bundled sample, speed on a synthetic 100k-passage corpus, MCP load.

Every ratio is against a baseline measured in the same run on the same machine:

    uv run python benchmarks/retrieval.py                 # all parts (about 3-4 minutes on 2 cores)
    uv run python benchmarks/retrieval.py --parts quality,speed

Parts:
- quality: recall@5 of bm25 / dense / hybrid on the HotpotQA sample, and a seed-style baseline
  (stemmed corpus but unstemmed queries, RRF k=60) computed from the same index.
- speed: BM25 (bm25s, numba) batch retrieval and build time + peak RSS on 100k synthetic passages; faiss
  Flat search from query vectors; the share of a hybrid query spent in fusion; bm25s vs rank_bm25 on 10k
  passages with the top-10 agreement of the matching variant (bm25s robertson == BM25Okapi epsilon=0).
- distinct: hybrid recall@5 with raw chunks vs the top-5 distinct documents (the default), and the share of
  questions whose raw top-5 repeats a document, on the sample index (200-token chunks) and on the same contexts
  cut into 64-token chunks (long documents: several chunks per document, as in Wikipedia-page corpora).
- mcp: 50 concurrent clients x 100 calls against `agentrl serve --transport http` on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _util import cpu_seconds, preset_index

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl"


def sample_index() -> Path:
    """Return the demo preset's sample index, building it (about a minute of embedding) if needed."""
    return preset_index("demo", ROOT / "runs", progress=False)


# ----------------------------------------------------------------------------- quality


def bench_distinct(index_dir: Path, chunk_size: int = 64) -> dict:
    """Return hybrid recall@5 raw vs distinct per setting, with the share of questions whose raw top-5 repeats
    a document (same title)."""
    import tempfile

    from agentrl.data.corpus import Chunker, chunk_documents, documents_from_contexts, embedder_tokenizer, load_qa
    from agentrl.retrieval import Retriever, build_index
    from agentrl.retrieval.evaluate import evaluate_retrieval

    rows = load_qa(SAMPLE)
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "index"
        docs = documents_from_contexts(rows)
        passages = list(chunk_documents(docs, Chunker(embedder_tokenizer("minilm"), chunk_size, 16)))
        build_index(passages, small, progress=False)
        for name, directory in (("chunks_200", index_dir), (f"chunks_{chunk_size}", small)):
            retriever = Retriever.load(directory)
            titles = retriever.titles()
            raw = retriever.rank_batch([r["question"] for r in rows], 5, "hybrid", distinct=False)
            repeated = sum(len({titles[i] for i, _ in hits}) < len(hits) for hits in raw) / len(rows)
            res = {"passages": len(retriever), "questions_with_repeats_in_raw_top5": round(repeated, 4)}
            for distinct in (False, True):
                retriever.cfg.distinct = distinct
                report = evaluate_retrieval(retriever, rows, methods=("hybrid",), ks=(5,))
                res["distinct" if distinct else "raw"] = report["methods"]["hybrid"]["recall@5"]
            out[name] = res
    return out



def bench_quality(index_dir: Path) -> dict:
    from agentrl.data.corpus import gold_titles, load_qa
    from agentrl.retrieval import BM25Config, Retriever, rrf
    from agentrl.retrieval.bm25 import tokenize
    from agentrl.retrieval.evaluate import evaluate_retrieval, question_metrics

    retriever = Retriever.load(index_dir)
    rows = load_qa(SAMPLE)
    report = evaluate_retrieval(retriever, rows, ks=(5, 10))
    out = {m: v["recall@5"] for m, v in report["methods"].items()}

    # Seed-style baseline: the corpus is stemmed, the queries are not; RRF k=60 with dense.
    titles = retriever.titles()
    unstemmed = BM25Config(**{**retriever.bm25.cfg.__dict__, "stemmer": None})
    questions = [r["question"] for r in rows]
    idx, sc = retriever.bm25.search_tokens(tokenize(questions, unstemmed), 50)
    qv = retriever.embedder.encode_queries(questions)
    didx, _ = retriever.dense.search(qv, 50)
    seed_recall = []
    for row, bi, bs, di in zip(rows, idx, sc, didx, strict=True):
        sparse = [int(i) for i, s in zip(bi, bs, strict=True) if s > 0]
        fused = rrf([sparse, [int(i) for i in di if i >= 0]], k=60)[:5]
        seed_recall.append(question_metrics([titles[i] for i, _ in fused], set(gold_titles(row)), (5,))["recall@5"])
    out["seed_baseline"] = round(float(np.mean(seed_recall)), 4)
    out["hybrid_minus_best_single"] = round(out["hybrid"] - max(out["bm25"], out["dense"]), 4)
    out["hybrid_minus_seed"] = round(out["hybrid"] - out["seed_baseline"], 4)
    out["gold_present_share"] = report["summary"]["gold_present_share"]
    out.update(hybrid_query_breakdown(retriever, questions))
    return out


def hybrid_query_breakdown(retriever, questions: list[str]) -> dict:
    """Time the stages of real hybrid queries (MiniLM encoding included) on the sample index."""
    from agentrl.retrieval import fuse_batch

    retriever.search_batch(questions[:8], 5)
    cfg = retriever.cfg
    t = time.perf_counter()
    b_idx, b_sc = retriever.bm25.search(questions, cfg.depth)
    t_b = time.perf_counter() - t
    t = time.perf_counter()
    qv = retriever.embedder.encode_queries(questions)
    t_e = time.perf_counter() - t
    t = time.perf_counter()
    d_idx, d_sc = retriever.dense.search(qv, cfg.depth)
    t_d = time.perf_counter() - t
    t = time.perf_counter()
    fuse_batch([np.where(b_sc > 0, b_idx, -1), d_idx], [b_sc, d_sc], cfg.fusion, cfg.weights, cfg.rrf_k)
    t_f = time.perf_counter() - t
    total = t_b + t_e + t_d + t_f
    return {"hybrid_ms_per_query": 1000 * total / len(questions), "fusion_share_of_hybrid_query": t_f / total,
            "encoding_share_of_hybrid_query": t_e / total}


# ----------------------------------------------------------------------------- speed


def synthetic_corpus(n_docs: int, n_queries: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Return (passages, queries) of pseudo-words with a Zipf-like vocabulary of 30k words."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pe", "dan", "gor", "lin", "ber", "tus", "qua"]
    vocab = sorted({"".join(rng.choice(syllables, size=rng.integers(2, 5))) for _ in range(40_000)})[:30_000]
    probs = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    probs /= probs.sum()
    lengths = rng.integers(9, 32, size=n_docs)
    words = rng.choice(len(vocab), size=int(lengths.sum()), p=probs)
    docs, pos = [], 0
    for n in lengths:
        docs.append(" ".join(vocab[w] for w in words[pos:pos + n]))
        pos += n
    queries = []
    for d in rng.integers(0, n_docs, size=n_queries):
        toks = docs[d].split()
        queries.append(" ".join(rng.choice(toks, size=min(len(toks), rng.integers(2, 6)), replace=False)))
    return docs, queries


def _bm25_build_child(docs: list[str], conn) -> None:
    from agentrl.retrieval import BM25Config, BM25Index

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    BM25Index.build(docs, BM25Config(backend="numba"))
    conn.send({"build_s": time.perf_counter() - t,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "peak_rss_increase_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024})


def bench_speed(n_docs: int = 100_000, n_queries: int = 2_000) -> dict:
    from agentrl.retrieval import BM25Config, BM25Index, DenseConfig, DenseIndex, fuse_batch
    from agentrl.retrieval.bm25 import tokenize
    from agentrl.retrieval.dense import _faiss

    faiss = _faiss()

    out: dict = {}
    docs, queries = synthetic_corpus(n_docs, n_queries)

    # BM25 build in a child process so its peak RSS is its own
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_bm25_build_child, args=(docs, child))
    proc.start()
    out["bm25_build"] = parent.recv()
    proc.join()

    index = BM25Index.build(docs, BM25Config(backend="numba"))
    index.search(queries[:50], 10)  # numba JIT warm-up (several seconds, once per process)
    t = time.perf_counter()
    tokens = tokenize(queries, index.cfg)
    t_tok = time.perf_counter() - t
    t = time.perf_counter()
    index.search_tokens(tokens, 10)
    t_ret = time.perf_counter() - t
    out["bm25_qps_with_tokenize"] = n_queries / (t_tok + t_ret)
    out["bm25_qps_retrieve_only"] = n_queries / t_ret
    numpy_index = BM25Index.build(docs[:], BM25Config(backend="numpy"))
    t = time.perf_counter()
    numpy_index.search_tokens(tokens[:200], 10)
    out["bm25_numpy_backend_qps"] = 200 / (time.perf_counter() - t)

    # dense Flat search from query vectors
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(256, 384)).astype(np.float32)
    vecs = centers[rng.integers(0, 256, n_docs)] + 0.5 * rng.normal(size=(n_docs, 384)).astype(np.float32)
    faiss.normalize_L2(vecs)
    qv = vecs[rng.integers(0, n_docs, n_queries)] + 0.1 * rng.normal(size=(n_queries, 384)).astype(np.float32)
    faiss.normalize_L2(qv)
    dense = DenseIndex.build(vecs, DenseConfig(faiss_threads=1))
    dense.search(qv[:10], 10)
    for threads in (1, 2):
        faiss.omp_set_num_threads(threads)
        for batch in (256, n_queries):
            t = time.perf_counter()
            for start in range(0, n_queries, batch):
                dense.search(qv[start:start + batch], 10)
            out[f"dense_flat_qps_{threads}_thread_batch_{batch}"] = n_queries / (time.perf_counter() - t)
    # faiss defaults, for the ratio: BLAS only above 512 queries per call
    threshold = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 128_000
    t = time.perf_counter()
    dense.search(qv[:256], 10)
    out["dense_flat_qps_faiss_default_threshold_batch_256"] = 256 / (time.perf_counter() - t)
    faiss.cvar.distance_compute_blas_threshold = threshold
    faiss.omp_set_num_threads(1)

    # share of fusion in a hybrid query from query vectors (depth 50 per side, batches of 256)
    nq, t_b, t_d, t_f = 256, 0.0, 0.0, 0.0
    for start in range(0, n_queries, nq):
        t = time.perf_counter()
        b_idx, b_sc = index.search_tokens(tokenize(queries[start:start + nq], index.cfg), 50)
        t_b += time.perf_counter() - t
        t = time.perf_counter()
        d_idx, d_sc = dense.search(qv[start:start + nq], 50)
        t_d += time.perf_counter() - t
        t = time.perf_counter()
        fuse_batch([np.where(b_sc > 0, b_idx, -1), d_idx], [b_sc, d_sc], "zscore")
        t_f += time.perf_counter() - t
    out["fusion_share_of_hybrid_query_from_vectors"] = t_f / (t_b + t_d + t_f)
    out["fusion_ms_per_query"] = 1000 * t_f / n_queries
    out.update(bench_rank_bm25(docs[:10_000], queries[:200]))
    return out


def bench_rank_bm25(docs: list[str], queries: list[str]) -> dict:
    from rank_bm25 import BM25Okapi

    from agentrl.retrieval import BM25Config, BM25Index
    from agentrl.retrieval.bm25 import tokenize

    cfg = BM25Config(k1=1.5, b=0.75, method="robertson", backend="numpy")
    toks, qtoks = tokenize(docs, cfg), tokenize(queries, cfg)
    ours = BM25Index.build(docs, cfg)
    theirs = BM25Okapi(toks, k1=1.5, b=0.75, epsilon=0.0)
    t = time.perf_counter()
    o_idx, o_sc = ours.search_tokens(qtoks, 10)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    agree = 0
    for q, oi, osc in zip(qtoks, o_idx, o_sc, strict=True):
        scores = theirs.get_scores(q) / (cfg.k1 + 1)  # bm25s robertson omits the (k1 + 1) numerator factor
        kth = np.sort(scores)[-10]
        # identical up to ties at the 10th score: every bm25s doc scores >= the 10th rank_bm25 score
        agree += bool(np.all(scores[oi] >= kth - 1e-4) and abs(scores[oi[0]] - osc[0]) < 1e-3)
    t_theirs = time.perf_counter() - t
    n = len(queries)
    return {"rank_bm25_ms_per_query": 1000 * t_theirs / n, "bm25s_ms_per_query": 1000 * t_ours / n,
            "speedup_vs_rank_bm25": t_theirs / t_ours, "top10_identical_share_vs_rank_bm25": agree / n}


# ----------------------------------------------------------------------------- MCP


def bench_mcp(index_dir: Path, clients: int = 50, calls: int = 100) -> dict:
    from mcp import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.cli", "serve", "--index", str(index_dir), "--transport",
                             "http", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        from agentrl.data.corpus import load_qa

        questions = [r["question"] for r in load_qa(SAMPLE)]
        latencies: list[float] = []
        errors = 0

        async def client(ci: int):
            nonlocal errors
            async with Client(url) as c:
                for j in range(calls):
                    q = questions[(ci * calls + j) % len(questions)]
                    t = time.perf_counter()
                    r = await c.call_tool("search", {"query": q, "top_k": 5})
                    latencies.append(time.perf_counter() - t)
                    errors += bool(r.is_error) or len(r.structured_content["result"]) != 5

        async def main():
            await asyncio.gather(*(client(i) for i in range(clients)))

        cpu0 = cpu_seconds(proc.pid)
        t, c = time.perf_counter(), time.process_time()
        asyncio.run(main())
        wall, client_cpu = time.perf_counter() - t, time.process_time() - c
        server_cpu = cpu_seconds(proc.pid) - cpu0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lat = np.array(latencies) * 1000
    return {"clients": clients, "calls": len(latencies), "errors": errors, "calls_per_s": len(latencies) / wall,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)), "wall_s": wall,
            "server_cpu_ms_per_call": 1000 * server_cpu / len(latencies),
            "client_cpu_ms_per_call": 1000 * client_cpu / len(latencies)}



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="quality,distinct,speed,mcp")
    ap.add_argument("--index", help="index directory (default: the demo preset's sample index)")
    ap.add_argument("--docs", type=int, default=100_000)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parts = set(args.parts.split(","))
    results: dict = {}
    index_dir = Path(args.index) if args.index else sample_index() if parts & {"quality", "distinct", "mcp"} else None
    if "quality" in parts:
        q = results["quality"] = bench_quality(index_dir)
        print(f"quality (recall@5, HotpotQA sample; {100 * q['gold_present_share']:.1f}% of gold in corpus): "
              f"bm25 {q['bm25']:.4f}  dense {q['dense']:.4f}  hybrid {q['hybrid']:.4f}  "
              f"seed-style {q['seed_baseline']:.4f}  | hybrid - best single {q['hybrid_minus_best_single']:+.4f}  "
              f"hybrid - seed {q['hybrid_minus_seed']:+.4f}")
        print(f"  hybrid query {q['hybrid_ms_per_query']:.2f} ms (batch of 200, MiniLM encoding "
              f"{100 * q['encoding_share_of_hybrid_query']:.0f}%), "
              f"fusion {100 * q['fusion_share_of_hybrid_query']:.2f}%")
    if "distinct" in parts:
        d = results["distinct"] = bench_distinct(index_dir)
        for name, v in d.items():
            print(f"distinct ({name}, {v['passages']} passages): hybrid recall@5 raw {v['raw']:.4f} -> distinct "
                  f"{v['distinct']:.4f} ({v['distinct'] - v['raw']:+.4f}); raw top-5 repeats a document for "
                  f"{100 * v['questions_with_repeats_in_raw_top5']:.1f}% of questions")
    if "speed" in parts:
        n_q = 2_000
        s = results["speed"] = bench_speed(args.docs, n_q)
        b = s["bm25_build"]
        flat = {k.removeprefix("dense_flat_qps_"): v for k, v in s.items() if k.startswith("dense_flat_qps_")}
        print(f"speed ({args.docs:,} synthetic passages):")
        print(f"  bm25 build {b['build_s']:.1f} s, peak RSS {b['peak_rss_mb']:.0f} MB "
              f"(+{b['peak_rss_increase_mb']:.0f} MB for the build)")
        print(f"  bm25 batch retrieval {s['bm25_qps_with_tokenize']:,.0f} q/s incl. tokenising "
              f"({s['bm25_qps_retrieve_only']:,.0f} retrieval only); numpy backend "
              f"{s['bm25_numpy_backend_qps']:,.0f} q/s "
              f"(x{s['bm25_qps_retrieve_only'] / s['bm25_numpy_backend_qps']:.0f})")
        print(f"  dense flat search from query vectors, batches of 256: {flat['1_thread_batch_256']:,.0f} q/s "
              f"(1 thread), {flat['2_thread_batch_256']:,.0f} (2); one batch of {n_q}: "
              f"{flat[f'1_thread_batch_{n_q}']:,.0f} / {flat[f'2_thread_batch_{n_q}']:,.0f} q/s; faiss default "
              f"BLAS threshold: {flat['faiss_default_threshold_batch_256']:,.0f} q/s "
              f"(x{flat['1_thread_batch_256'] / flat['faiss_default_threshold_batch_256']:.0f})")
        print(f"  fusion {s['fusion_ms_per_query'] * 1000:.1f} us/query = "
              f"{100 * s['fusion_share_of_hybrid_query_from_vectors']:.1f}% of a hybrid query from query vectors")
        print(f"  vs rank_bm25 (10k passages): {s['bm25s_ms_per_query']:.3f} vs {s['rank_bm25_ms_per_query']:.2f} "
              f"ms/query, x{s['speedup_vs_rank_bm25']:.0f}; identical top-10 in "
              f"{100 * s['top10_identical_share_vs_rank_bm25']:.1f}% of queries (robertson vs BM25Okapi epsilon=0)")
    if "mcp" in parts:
        m = results["mcp"] = bench_mcp(index_dir)
        print(f"mcp ({m['clients']} clients x {m['calls'] // m['clients']} calls, streamable HTTP, hybrid top-5): "
              f"{m['calls_per_s']:.0f} calls/s, p50 {m['p50_ms']:.0f} ms, p99 {m['p99_ms']:.0f} ms, "
              f"errors {m['errors']}; CPU per call: server {m['server_cpu_ms_per_call']:.1f} ms, "
              f"clients {m['client_cpu_ms_per_call']:.1f} ms")
    out = ROOT / "runs" / "bench" / "retrieval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
