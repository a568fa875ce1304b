"""SQL text handling for the SQLite backend: a tokeniser, MySQL -> SQLite spellings, and a sound bound on how far
SQLite would expand common table expressions before any time limit can act.

- :func:`tokens` splits SQLite SQL into tokens (strings, quoted identifiers, comments, words, numbers, punctuation).
- :func:`mysql_to_sqlite` rewrites MySQL string literals (backslash escapes) and bare digit-leading table names.
- :func:`hash_dialect` rewrites a write for the MySQL-like copy AgentBench's table hash is computed on: numbers
  written into columns keep MySQL's text, numbers compared with a column compare numerically (see the function).
- :func:`cte_expansion` over-approximates the number of tokens SQLite builds while preparing a statement whose CTEs
  refer to each other: ``cost(cte) = tokens(body) + sum of cost(referenced CTE)`` over the references in its body;
  the statement's size is its own tokens plus the cost of every CTE it references. ``c1`` reading ``c0`` twice,
  ``c2`` reading ``c1`` twice, ... costs 2**depth: SQLite would inline that many copies at prepare time, where
  neither the progress handler nor an interrupt runs.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# one alternative per token kind; a string or comment left open runs to the end, as SQLite reads it
_SQLITE_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<ident>"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z))
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)(?![\w$]))
  | (?P<word>[\w$]+|[?:@][\w$]*)
  | (?P<punct>\|\||<<|>>|<=|>=|==|!=|<>|->>|->|.)
""", re.X | re.S)


@dataclass(frozen=True)
class Token:
    """One token: its kind (ws, comment, string, ident, number, word, punct), text and start offset."""

    kind: str
    text: str
    start: int

    @property
    def upper(self) -> str:
        """The text in upper case (keywords)."""
        return self.text.upper()


def tokens(sql: str, *, significant: bool = True) -> list[Token]:
    """Return the tokens of SQLite SQL ``sql``; without whitespace and comments unless ``significant`` is False."""
    out = []
    for m in _SQLITE_TOKEN.finditer(sql):
        kind = m.lastgroup
        if significant and kind in ("ws", "comment"):
            continue
        out.append(Token(kind, m.group(), m.start()))
    return out


def first_keyword(sql: str) -> str:
    """Return the statement's first word in upper case, after whitespace and comments ("" for none)."""
    first = next(iter(tokens(sql)), None)
    return first.upper if first is not None and first.kind == "word" else ""


def name_of(token: Token) -> str:
    """Return the name a word or quoted identifier (or string used as a name) stands for, lower-cased."""
    t = token.text
    if token.kind in ("ident", "string") and len(t) >= 2:
        quote = t[0]
        inner = t[1:-1] if t[-1] == {"[": "]"}.get(quote, quote) else t[1:]
        return (inner if quote == "[" else inner.replace(quote * 2, quote)).lower()
    return t.lower()


# ----------------------------------------------------------------------------- MySQL -> SQLite

_MYSQL_ESCAPES = {"0": "\x00", "'": "'", '"': '"', "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a",
                  "\\": "\\", "%": "\\%", "_": "\\_"}  # \% and \_ keep their backslash (LIKE patterns)
_MYSQL_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|\#[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>'(?:[^'\\]|\\.|'')*')
  | (?P<dq>"(?:[^"\\]|\\.|"")*")
  | (?P<ident>`(?:[^`]|``)*`|\[[^\]]*\])
  | (?P<open>['"])
  | (?P<other>[^\s'"`\[#/-]+|.)
""", re.X | re.S)


def _mysql_unescape(body: str, quote: str) -> str:
    """The value of a MySQL string literal's inside: backslash escapes and doubled quotes resolved."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(_MYSQL_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        elif c == quote and body[i + 1:i + 2] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def sqlite_string(value: str) -> str:
    """Return ``value`` as a SQLite string literal (a NUL, which SQL text cannot hold, as ``char(0)``)."""
    parts = ["'" + p.replace("'", "''") + "'" for p in value.split("\x00")]
    return parts[0] if len(parts) == 1 else "(" + " || char(0) || ".join(parts) + ")"


def mysql_to_sqlite(sql: str, table_name: str | None = None, *, double_quoted_strings: bool = False) -> str:
    """Return ``sql`` with the MySQL spellings SQLite reads otherwise rewritten:

    - single-quoted string literals take MySQL's backslash escapes (``\\n``, ``\\t``, ``\\r``, ``\\0``, ``\\Z``,
      ``\\b``, ``\\\\``, ``\\'``, ``\\"``; ``\\%``/``\\_`` keep the backslash; any other ``\\x`` is ``x``) and
      become SQLite literals with the same value;
    - with ``double_quoted_strings`` (MySQL's own statements: the gold), double-quoted text is a MySQL string too:
      its escapes are resolved and it stays double-quoted, which SQLite reads as that string when no column has
      the name; otherwise (a SQLite statement) double quotes delimit an identifier and are left alone;
    - a ``#`` comment becomes ``--``; the task's table name written bare where SQLite needs it quoted (MySQL
      accepts ``INSERT INTO 1952_British_Grand_Prix_0``; SQLite takes no identifier that starts with a digit).

    Backticks and [brackets] SQLite accepts as identifier quotes. A statement that does not lex as MySQL (a string
    left open) is returned unchanged, for SQLite to report."""
    out = []
    bare = re.compile(rf"(?<![\w$]){re.escape(table_name)}(?![\w$])") \
        if table_name and re.fullmatch(r"\w+", table_name) and table_name[0].isdigit() else None
    for m in _MYSQL_TOKEN.finditer(sql):
        kind, text = m.lastgroup, m.group()
        if kind == "open":
            return sql
        if kind == "string":
            out.append(sqlite_string(_mysql_unescape(text[1:-1], "'")))
        elif kind == "dq" and double_quoted_strings:
            value = _mysql_unescape(text[1:-1], '"')
            out.append(sqlite_string(value) if "\x00" in value else '"' + value.replace('"', '""') + '"')
        elif kind == "comment" and text.startswith("#"):
            out.append("--" + text[1:])
        elif kind == "other" and bare is not None:
            out.append(bare.sub('"' + (table_name or "") + '"', text))
        else:
            out.append(text)
    return "".join(out)


# ----------------------------------------------------------------------------- the hash copy's dialect

_COMPARISON = {"=", "==", "!=", "<>", "<", "<=", ">", ">="}
_SET_END = {"WHERE", "FROM", "RETURNING", "ORDER", "LIMIT"}


def mysql_number_text(literal: str, sign: str = "") -> str | None:
    """Return the text MySQL stores in a TEXT column for a numeric literal (an integer without leading zeros, a
    decimal as written: ``5.50`` stays ``5.50``); None for literals whose text MySQL makes otherwise (exponents,
    hex)."""
    if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", literal):
        return None
    whole, _, frac = literal.partition(".")
    text = (whole.lstrip("0") or "0") + (f".{frac}" if frac else "")
    return ("-" + text) if sign == "-" and text.strip("0.") else text


_EQUALITY = {"=", "==", "!=", "<>"}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(text: str) -> str:
    """Return ``text`` with accents removed and case folded: what MySQL's accent- and case-insensitive default
    collation (utf8mb4_0900_ai_ci) compares, approximately."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).casefold()


def fold_map(values) -> dict[str, tuple[str, ...]]:
    """Return ``{fold(v): the distinct values with that fold}`` for the text values of a table."""
    out: dict[str, set[str]] = {}
    for v in values:
        if v is not None:
            out.setdefault(fold(str(v)), set()).add(str(v))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def hash_dialect(sql: str, stored: dict[str, tuple[str, ...]] | None = None) -> str:
    """Return a write rewritten for the copy of the task table that AgentBench's hash is taken from, whose columns
    are all TEXT (as AgentBench creates them) and ``COLLATE NOCASE``:

    - a number written into a column (``SET c = 5.50``, ``VALUES (5.50)``) becomes the text MySQL would store
      ('5.50', where SQLite would store '5.5');
    - a number compared with something (``c > 99``, ``BETWEEN 1 AND 9``) becomes ``CAST(99 AS NUMERIC)``, whose
      NUMERIC affinity makes SQLite compare the column's text as a number, as MySQL compares a TEXT column with a
      number;
    - strings compared for equality as in :func:`match_accents`."""
    toks = tokens(sql, significant=False)
    sig = [i for i, t in enumerate(toks) if t.kind not in ("ws", "comment")]
    replace: dict[int, str] = {}
    drop: set[int] = set()
    depth, set_depth, values_depth, between, between_and = 0, None, None, False, -1
    for n, i in enumerate(sig):
        t = toks[i]
        prev = toks[sig[n - 1]] if n else None
        nxt = toks[sig[n + 1]] if n + 1 < len(sig) else None
        if t.text == "(":
            depth += 1
            continue
        if t.text == ")":
            depth -= 1
            if set_depth is not None and depth < set_depth:
                set_depth = None
            continue
        if t.kind == "word":
            word = t.upper
            if word == "SET":
                set_depth = depth
            elif word == "VALUES":
                values_depth = depth
            elif word in _SET_END and set_depth == depth:
                set_depth = None
            if word == "BETWEEN":
                between = True
            elif word == "AND" and between:
                between, between_and = False, i  # this AND is BETWEEN's, not a boolean one
            continue
        if values_depth is not None and depth == values_depth and t.text not in (",", "("):
            values_depth = None
        if t.kind != "number":
            continue
        sign_tok = prev if prev is not None and prev.text in ("-", "+") else None
        before = toks[sig[n - 2]] if sign_tok is not None and n >= 2 else prev
        after = nxt.text if nxt is not None else ""
        written = (set_depth == depth and before is not None and before.text == "="
                   and (after in (",", ";", "") or (nxt is not None and nxt.upper in _SET_END))) or \
                  (values_depth is not None and depth == values_depth + 1 and before is not None
                   and before.text in ("(", ",") and after in (",", ")"))
        if written:
            text = mysql_number_text(t.text, sign_tok.text if sign_tok is not None else "")
            if text is not None:
                replace[i] = sqlite_string(text)
                if sign_tok is not None:
                    drop.add(sig[n - 1])
            continue
        of_between = between_and >= 0 and before is toks[between_and]
        compared = after in _COMPARISON or before is not None and (
            before.text in _COMPARISON or before.upper == "BETWEEN" or of_between)
        if compared:
            literal = (sign_tok.text if sign_tok is not None else "") + t.text
            replace[i] = f"CAST({literal} AS NUMERIC)"
            if sign_tok is not None:
                drop.add(sig[n - 1])
    return match_accents("".join(replace.get(i, t.text) for i, t in enumerate(toks) if i not in drop), stored)


def match_accents(sql: str, stored: dict[str, tuple[str, ...]] | None) -> str:
    """Return ``sql`` with each string compared for equality (``c = 'Montreal'``, not ``SET c = '...'``) that
    equals exactly one value of the table (``stored``, from :func:`fold_map`) up to accents and case, where NOCASE
    (ASCII case only) would miss it, replaced by that value ('Montréal'), as MySQL's accent-insensitive collation
    matches it. Ordering and LIKE stay accent-sensitive (a difference from MySQL)."""
    if not stored:
        return sql
    toks = tokens(sql, significant=False)
    sig = [i for i, t in enumerate(toks) if t.kind not in ("ws", "comment")]
    out = {}
    depth, set_depth = 0, None  # SET c = 'x' writes 'x': only comparisons are matched
    for n, i in enumerate(sig):
        t = toks[i]
        depth += (t.text == "(") - (t.text == ")")
        if set_depth is not None and (depth < set_depth or (depth == set_depth and t.upper in _SET_END)):
            set_depth = None
        if t.kind == "word" and t.upper == "SET":
            set_depth = depth
        if t.kind != "string":
            continue
        prev = toks[sig[n - 1]] if n else None
        nxt = toks[sig[n + 1]] if n + 1 < len(sig) else None
        written = set_depth == depth and prev is not None and prev.text == "="
        compared = (prev is not None and prev.text in _EQUALITY) or (nxt is not None and nxt.text in _EQUALITY)
        if written or not compared:
            continue
        value = t.text[1:-1].replace("''", "'")
        matches = stored.get(fold(value), ())
        if len(matches) == 1 and matches[0].translate(_ASCII_LOWER) != value.translate(_ASCII_LOWER):
            out[i] = sqlite_string(matches[0])
    return "".join(out.get(i, t.text) for i, t in enumerate(toks)) if out else sql


# ----------------------------------------------------------------------------- CTE expansion bound

MAX_CTE_EXPANSION = 100_000  # tokens; the chain bomb at 2**12 copies (~90k tokens) prepares in ~10 ms and ~5 MB


@dataclass
class _Cte:
    name: str
    name_at: int  # token index of the name
    body: tuple[int, int]  # token indexes of its "(" and ")"
    scope: tuple[int, int]  # token indexes of its WITH and the end of the query the WITH belongs to


def _groups(toks: list[Token]) -> tuple[dict[int, int], list[int]]:
    """Return ``{index of "(": index of its ")"}`` and, per token, the index where its enclosing group ends (an
    unclosed "(" runs to the end)."""
    match: dict[int, int] = {}
    end_of = [len(toks)] * len(toks)
    stack: list[int] = []
    for i, t in enumerate(toks):
        if t.text == "(":
            stack.append(i)
        elif t.text == ")" and stack:
            match[stack.pop()] = i
    for opened in stack:
        match[opened] = len(toks) - 1
    stack = []
    for i, t in enumerate(toks):
        if t.text == ")" and stack and match.get(stack[-1]) == i:
            stack.pop()
        end_of[i] = match[stack[-1]] if stack else len(toks)
        if t.text == "(":
            stack.append(i)
    return match, end_of


def _ctes(toks: list[Token], match: dict[int, int], end_of: list[int]) -> list[_Cte]:
    """Every CTE definition of every WITH clause (any level): ``name [(columns)] AS [NOT] [MATERIALIZED] (body)``."""
    found = []
    names = ("word", "ident", "string")
    for w, t in enumerate(toks):
        if not (t.kind == "word" and t.upper == "WITH"):
            continue
        j = w + 1 + (w + 1 < len(toks) and toks[w + 1].upper == "RECURSIVE")
        while j < len(toks) and toks[j].kind in names:
            name_at = j
            j += 1
            if j < len(toks) and toks[j].text == "(":
                j = match[j] + 1
            if not (j < len(toks) and toks[j].upper == "AS"):
                break
            j += 1
            if j < len(toks) and toks[j].upper == "NOT":
                j += 1
            if j < len(toks) and toks[j].upper == "MATERIALIZED":
                j += 1
            if not (j < len(toks) and toks[j].text == "("):
                break
            found.append(_Cte(name_of(toks[name_at]), name_at, (j, match[j]), (w, end_of[w])))
            j = match[j] + 1
            if not (j < len(toks) and toks[j].text == ","):
                break
            j += 1
    return found


def cte_expansion(sql: str, limit: int = MAX_CTE_EXPANSION) -> int:
    """Return an upper bound on the tokens SQLite builds preparing ``sql`` (see the module docstring), capped at
    ``limit + 1``. A reference is any name token equal to a CTE's name (columns and aliases of that name count
    too: an over-approximation), resolved to the innermost WITH that defines it; a CTE's reference to itself is
    recursion (not inlined); a cycle between CTEs counts as over the limit (SQLite refuses it anyway)."""
    toks = tokens(sql)
    if not any(t.kind == "word" and t.upper == "WITH" for t in toks):
        return len(toks)
    match, end_of = _groups(toks)
    ctes = _ctes(toks, match, end_of)
    by_name: dict[str, list[int]] = {}
    for k, c in enumerate(ctes):
        by_name.setdefault(c.name, []).append(k)
    definitions = {c.name_at for c in ctes}

    def resolve(i: int, name: str) -> list[int]:
        visible = [k for k in by_name.get(name, ()) if ctes[k].scope[0] < i <= ctes[k].scope[1]]
        if not visible:
            return []
        inner = max(ctes[k].scope[0] for k in visible)
        return [k for k in visible if ctes[k].scope[0] == inner]  # duplicates in one WITH: all (SQLite refuses)

    refs_in: list[list[int]] = [[] for _ in ctes]
    top: list[int] = []
    for i, t in enumerate(toks):
        if t.kind not in ("word", "ident", "string") or i in definitions or name_of(t) not in by_name:
            continue
        targets = resolve(i, name_of(t))
        inside = [k for k, c in enumerate(ctes) if c.body[0] < i < c.body[1]]
        for k in inside:
            refs_in[k].extend(x for x in targets if x != k)  # a CTE reading itself recurses, it is not inlined
        if not inside:
            top.extend(targets)

    cap = limit + 1
    cost: dict[int, int] = {}
    state: dict[int, str] = {}
    for root in range(len(ctes)):  # iterative post-order: chains of thousands of CTEs must not hit recursion limits
        stack = [root]
        while stack:
            k = stack[-1]
            if k in cost:
                stack.pop()
                continue
            if state.get(k) != "open":
                state[k] = "open"
                for d in refs_in[k]:
                    if state.get(d) == "open":
                        return cap  # a cycle
                    if d not in cost:
                        stack.append(d)
                continue
            body = ctes[k].body
            cost[k] = min(cap, (body[1] - body[0] + 1) + sum(cost[d] for d in refs_in[k]))
            state[k] = "done"
            stack.pop()
    return min(cap, len(toks) + sum(cost[k] for k in top))
