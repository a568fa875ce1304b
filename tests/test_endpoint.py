"""The endpoint policy against real scripted endpoint processes: settings resolution, what reaches the server,
reasoning fields, retry backoff, error types; and manifests keeping counts while masking credentials.

Every test that sends a request runs once per transport (``transport`` fixture: aiohttp and the openai SDK)."""

import asyncio
import json
import sys
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from agentrl.core.manifest import scrub, write_manifest
from agentrl.rollout.endpoint import (
    EndpointConfig,
    EndpointPolicy,
    FatalEndpointError,
    backoff_delay,
    resolve_settings,
)

KEY = "sk-test-endpoint-key-0123456789"


@pytest.fixture(scope="module")
def keyed_url():
    """A scripted endpoint process that answers only requests bearing KEY (401 otherwise)."""
    from conftest import SCRIPTED, free_port, start_process, stop_process

    port = free_port()
    proc = start_process([sys.executable, str(SCRIPTED), "--port", str(port), "--api-key", KEY],
                         port)
    yield f"http://127.0.0.1:{port}/v1"
    stop_process(proc)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No endpoint settings from the environment, and a working directory without a .env file."""
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def generate(cfg: EndpointConfig, text: str):
    """One assistant turn for a conversation whose user message is ``text`` (the client closed afterwards)."""
    pol = EndpointPolicy(cfg)

    async def go():
        try:
            return await pol.generate([{"role": "user", "content": text}], [])
        finally:
            await pol.aclose()

    return asyncio.run(go())


def recorded(url: str, contains: str) -> list[dict]:
    """The request bodies the scripted endpoint received for conversations containing ``contains``."""
    query = urllib.parse.urlencode({"contains": contains})
    with urllib.request.urlopen(f"{url}/_requests?{query}", timeout=10) as resp:
        return json.loads(resp.read())["data"]


def marker() -> str:
    return f"probe-{uuid.uuid4().hex[:12]}"  # the session's server counts attempts per conversation text


def test_base_url_key_and_model_come_from_environment_variables(keyed_url, clean_env, transport):
    clean_env.setenv("OPENAI_BASE_URL", keyed_url)
    clean_env.setenv("OPENAI_API_KEY", KEY)
    clean_env.setenv("OPENAI_MODEL", "from-env")
    assert resolve_settings(EndpointConfig()) == (keyed_url, KEY, "from-env")
    text = marker()
    assert generate(EndpointConfig(transport=transport), text).tool_calls  # the server accepted the key
    assert recorded(keyed_url, text)[0]["model"] == "from-env"
    # an explicit setting wins over the environment
    assert resolve_settings(EndpointConfig(model="flag"))[2] == "flag"
    with pytest.raises(FatalEndpointError, match="AuthenticationError: Error code: 401 - invalid api key"):
        generate(EndpointConfig(api_key="sk-wrong-key-000000", transport=transport), marker())
    with pytest.raises(FatalEndpointError, match="NotFoundError: Error code: 404 - The model `missing-1` does not"):
        generate(EndpointConfig(model="missing-1", transport=transport), marker())


def test_settings_come_from_a_dotenv_file_when_the_environment_has_none(keyed_url, clean_env, tmp_path, transport):
    (tmp_path / ".env").write_text(f'# endpoint\nexport OPENAI_BASE_URL="{keyed_url}"\n\n'
                                   f"OPENAI_API_KEY='{KEY}'\nOPENAI_MODEL=from-dotenv\n")
    assert resolve_settings(EndpointConfig()) == (keyed_url, KEY, "from-dotenv")
    text = marker()
    assert generate(EndpointConfig(transport=transport), text).tool_calls
    assert recorded(keyed_url, text)[0]["model"] == "from-dotenv"
    # the environment wins over .env
    clean_env.setenv("OPENAI_MODEL", "from-env")
    assert resolve_settings(EndpointConfig())[2] == "from-env"


def test_missing_settings_are_reported(clean_env):
    from agentrl.core.io import DataError

    with pytest.raises(DataError, match="OPENAI_BASE_URL"):
        resolve_settings(EndpointConfig(model="m"))
    with pytest.raises(DataError, match="OPENAI_MODEL"):
        resolve_settings(EndpointConfig(base_url="http://127.0.0.1:1/v1"))


def test_extra_body_reaches_the_server(endpoint_url, transport):
    text = marker()
    extra = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}
    generate(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY", max_tokens=77,
                            extra_body=extra, transport=transport), text)
    (body,) = recorded(endpoint_url, text)
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_k"] == 20
    assert body["max_tokens"] == 77 and body["temperature"] == 0.0


@pytest.mark.parametrize("mode,field", [("reasoning_field", "reasoning"), ("reasoning_only", "reasoning_content")])
def test_reasoning_is_read_from_either_field(endpoint_url, mode, field, transport):
    turn = generate(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY", transport=transport),
                    f"[[mode:{mode}]] {marker()}")
    expected = "Thinking (reasoning field) about" if field == "reasoning" else "I am still thinking about"
    assert turn.reasoning.startswith(expected) and turn.content == ""


def test_retry_after_zero_does_not_cancel_the_backoff(endpoint_url, transport):
    # the scripted 429s carry "Retry-After: 0"; waits must still grow (>= half of 0.2 * 2**attempt)
    start = time.perf_counter()
    turn = generate(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY", backoff_base=0.2,
                                   max_retries=3, transport=transport), f"[[fail:429:2]] {marker()}")
    assert turn.tool_calls and time.perf_counter() - start >= 0.1 + 0.2
    assert all(2.0 <= backoff_delay(3, 0.5, 30.0, 0.0) <= 4.0 for _ in range(50))
    assert backoff_delay(0, 0.5, 30.0, 10.0) == 10.0  # a longer Retry-After is honoured
    assert backoff_delay(0, 0.5, 30.0, 100.0) == 30.0  # but capped
    assert all(0.0 <= backoff_delay(2, 0.5, 30.0) <= 2.0 for _ in range(50))  # full jitter without a header


def test_the_retry_after_header_reaches_the_backoff(endpoint_url, transport, monkeypatch):
    import agentrl.rollout.endpoint as endpoint

    seen = []
    real = endpoint.backoff_delay

    def recording(attempt, base, cap, retry_after=None):
        seen.append(retry_after)
        return real(attempt, base, cap, retry_after)

    monkeypatch.setattr(endpoint, "backoff_delay", recording)
    generate(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY", backoff_base=0.001,
                            max_retries=2, transport=transport), f"[[fail:503:1]] {marker()}")
    assert seen == [0.0]  # the scripted 503 says "Retry-After: 0"


@pytest.mark.parametrize("kind", ["status_400", "status_422", "status_500_always", "status_503_html"])
def test_both_transports_raise_the_same_error_for_the_same_reply(endpoint_url, kind):
    import openai

    errors = {}
    for transport in ("aiohttp", "openai"):
        with pytest.raises(openai.APIStatusError) as info:
            generate(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY", max_retries=0,
                                    transport=transport), f"[[hostile:{kind}]] {marker()}")
        exc = info.value
        errors[transport] = (type(exc), str(exc), exc.status_code, exc.body)
    assert errors["aiohttp"] == errors["openai"]


def test_an_unknown_transport_is_refused():
    from agentrl.core.io import DataError

    with pytest.raises(DataError, match="unknown endpoint transport 'httpx'"):
        EndpointPolicy(EndpointConfig(base_url="http://127.0.0.1:1/v1", model="m", transport="httpx"))


def test_manifests_mask_credentials_but_keep_token_counts(tmp_path):
    config = {"policy": {"model": "m", "max_tokens": 512, "max_new_tokens": 64, "api_key": "sk-abc123",
                         "extra_body": {"max_completion_tokens": 9}},
              "hf_token": "hf_secret", "access_token": "tok", "authToken": "t", "client_secret": "s",
              "password": "p", "Authorization": "Bearer x", "usage": {"prompt_tokens": 3, "completion_tokens": 4},
              "tokenizer": "Qwen/Qwen3", "pad_token": "<|endoftext|>", "api_key_unset": None}
    path = write_manifest(tmp_path, phase="test", config=config)
    written = json.loads(path.read_text())["config"]
    assert written["policy"] == {"model": "m", "max_tokens": 512, "max_new_tokens": 64, "api_key": "***",
                                 "extra_body": {"max_completion_tokens": 9}}
    assert written["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}
    assert (written["tokenizer"], written["pad_token"]) == ("Qwen/Qwen3", "<|endoftext|>")
    for key in ("hf_token", "access_token", "authToken", "client_secret", "password", "Authorization"):
        assert written[key] == "***", key
    assert written["api_key_unset"] is None  # nothing to hide
    assert scrub({"note": "key sk-abc123 leaked"}, ("sk-abc123",)) == {"note": "key *** leaked"}
