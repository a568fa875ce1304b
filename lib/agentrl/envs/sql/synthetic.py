"""Synthetic SQL tasks in DB Bench's format, for training: DB Bench itself is for evaluation only.

Each table is drawn from one of twenty topics (league standings, shipwrecks, radio stations, ...) with a
randomised name (``Football Standings``, ``football_standings_2011``, ``Regional Football Standings``), 4-6 columns
of names, places, years, dates, scores and numbers written as text (``'64,798'``, ``'7.400'``; some names carry
an apostrophe, ``O'Neill``), and 8-11 rows. Seven tasks per table, phrased the ways DB Bench phrases them:
four SELECT tasks (lookup, counting, comparison, ranking or an aggregate: labels computed by running the gold
query on the table) and an INSERT, an UPDATE and a DELETE (scored by the table hash of the gold statement's
result, as AgentBench scores them). Variety is the point: a model trained on three fixed tables learns their
names; one trained on these must read the table name and headers from the question.

    synthetic_sql_tasks(20, seed=0)   # 140 task rows, ids syn_<table>_<task>
    synthetic_sql_tasks(20, seed=1)   # 140 other ones (other names, columns, rows), ids syn1_<table>_<task>
"""

from __future__ import annotations

import math
import random
import sqlite3

from agentrl.envs.sql.dbbench import dbbench_row
from agentrl.envs.sql.sandbox import build_database, quote

_FIRST = ["Anna", "Ben", "Carla", "David", "Elena", "Felix", "Grace", "Hugo", "Ines", "Jonas", "Karin", "Liam", "Maya",
          "Nils", "Olga", "Pablo", "Rosa", "Sam", "Tara", "Viktor", "Wendy", "Yusuf"]
_LAST = ["Adams", "Berg", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ivanova", "Jensen", "Kowalski",
         "Lopez", "Moreau", "Novak", "O'Neill", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka", "D'Angelo", "Weber"]
_CITIES = ["Arden", "Brisa", "Calder", "Dunmore", "Elmira", "Farrow", "Galen", "Harlow", "Islay", "Jorvik", "Kestrel",
           "Lumen", "Marlow", "Norrin", "Oakes", "Pell", "Quarry Bay", "Rivermouth", "Saltash", "Thornby"]
_COUNTRIES = ["Norland", "Sudria", "Estmark", "Westerra", "Corvia", "Maravia", "Ostland", "Valdora", "Brenmark",
              "Istria Nova", "Kaledon", "Lorvania", "Montelda", "Pravia", "Rhosland", "Tervia"]
_WORDS = ["Silver", "Northern", "Red", "Quiet", "Golden", "Last", "Hidden", "Iron", "Blue", "Distant", "Broken", "Wild"]
_NOUNS = ["River", "Harbor", "Garden", "Signal", "Summer", "Lantern", "Crown", "Horizon", "Orchard", "Echo", "Bridge"]
_TEAM_SUFFIX = ["United", "City", "Rovers", "Athletic", "Wanderers", "FC", "Town"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]


def _value(kind, rng: random.Random) -> str:
    """Return one cell of the given kind as DB Bench stores it: text."""
    if isinstance(kind, list):
        return rng.choice(kind)
    person = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    title = f"{rng.choice(_WORDS)} {rng.choice(_NOUNS)}"
    return {
        "person": person, "title": title, "city": rng.choice(_CITIES), "country": rng.choice(_COUNTRIES),
        "team": f"{rng.choice(_CITIES)} {rng.choice(_TEAM_SUFFIX)}", "ship": f"SS {rng.choice(_NOUNS)}",
        "company": f"{rng.choice(_WORDS)} {rng.choice(['Systems', 'Foods', 'Motors', 'Energy', 'Media'])}",
        "year": str(rng.randint(1950, 2023)), "small": str(rng.randint(0, 40)), "rank": str(rng.randint(1, 30)),
        "big": f"{rng.randint(1_000, 99_999):,}", "count": str(rng.randint(100, 9_999)),
        "float": f"{rng.uniform(1, 99):.3f}", "share": f"{rng.uniform(1, 60):.1f}",
        "date": f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}, {rng.randint(1950, 2023)}",
        "score": f"{rng.randint(0, 6)}-{rng.randint(0, 6)}", "result": f"{rng.choice('WL')} {rng.randint(3, 45)}-"
                                                                         f"{rng.randint(0, 40)}",
        "callsign": "K" + "".join(rng.choice("ABCDEFGHJKLMNPRSTWXZ") for _ in range(3)),
    }[kind]


# topic: (table name, columns as (name, kind)); the first column is the row key (unique), a list is a category
_TOPICS = [
    ("Football Standings", [("Club", "team"), ("Played", "small"), ("Wins", "small"), ("Draws", "small"),
                            ("Losses", "small"), ("Points", "small")]),
    ("Medal Table", [("Nation", "country"), ("Gold", "small"), ("Silver", "small"), ("Bronze", "small"),
                     ("Total", "small")]),
    ("Tallest Buildings", [("Building", "title"), ("City", "city"), ("Floors", "small"), ("Height m", "float"),
                           ("Year", "year")]),
    ("Film Releases", [("Title", "title"), ("Director", "person"), ("Year", "year"), ("Studio", "company"),
                       ("Gross", "big")]),
    ("Election Results", [("Candidate", "person"), ("Party", ["Liberal", "Labour", "Green", "Independent"]),
                          ("Votes", "big"), ("Share %", "share")]),
    ("Shipwrecks", [("Ship", "ship"), ("Date", "date"), ("Nationality", "country"), ("Tonnage", "big"),
                    ("Fate", ["Sunk", "Damaged", "Captured"])]),
    ("Race Results", [("Circuit", "city"), ("Round", "small"), ("Winner", "person"), ("Team", "team"),
                      ("Laps", "small")]),
    ("Album Chart", [("Album", "title"), ("Artist", "person"), ("Year", "year"), ("Peak position", "rank"),
                     ("Weeks on chart", "small")]),
    ("School Directory", [("School", "title"), ("Location", "city"), ("Founded", "year"), ("Students", "count"),
                          ("Type", ["Public", "Private", "Charter"])]),
    ("Tennis Champions", [("Year", "year"), ("Champion", "person"), ("Runner-up", "person"), ("Score", "score"),
                          ("Venue", "city"), ("Prize money", "big")]),
    ("Radio Stations", [("Call sign", "callsign"), ("Frequency MHz", "float"), ("City", "city"), ("ERP W", "count"),
                        ("Format", ["News", "Country", "Rock", "Talk"])]),
    ("Episode Guide", [("Title", "title"), ("Episode", "small"), ("Director", "person"), ("Air date", "date"),
                       ("Viewers millions", "float")]),
    ("Player Statistics", [("Player", "person"), ("Position", ["Forward", "Midfielder", "Defender", "Goalkeeper"]),
                           ("Games", "small"), ("Goals", "small"), ("Assists", "small")]),
    ("Company Revenue", [("Company", "company"), ("Industry", ["Retail", "Energy", "Media", "Transport"]),
                         ("Revenue", "big"), ("Employees", "count"), ("Headquarters", "city")]),
    ("Mountain Peaks", [("Peak", "title"), ("Country", "country"), ("Elevation m", "count"),
                        ("First ascent", "year")]),
    ("Train Stations", [("Station", "city"), ("Line", ["Red", "Blue", "Green", "Yellow"]), ("Opened", "year"),
                        ("Passengers", "big"), ("Platforms", "small")]),
    ("Award Winners", [("Film", "title"), ("Year", "year"), ("Award", ["Best Actor", "Best Director", "Best Score"]),
                       ("Winner", "person"), ("Nominations", "small")]),
    ("Game Schedule", [("Week", "small"), ("Date", "date"), ("Opponent", "team"), ("Result", "result"),
                       ("Attendance", "big")]),
    ("University Rankings", [("University", "title"), ("Country", "country"), ("Rank", "rank"), ("Score", "float"),
                             ("Founded", "year")]),
    ("Bridge Registry", [("Bridge", "title"), ("River", "title"), ("Length m", "count"), ("Opened", "year"),
                         ("Type", ["Suspension", "Arch", "Beam"])]),
]
_NUMERIC = {"small", "rank", "big", "count", "float", "share", "year"}


def _is_number(kind, years: bool = True) -> bool:
    return isinstance(kind, str) and kind in _NUMERIC and (years or kind != "year")


def _table(rng: random.Random, topic: int) -> tuple[dict, list[str]]:
    """Return a DB Bench ``table`` dict (a randomised name, 4-6 columns, 8-11 rows) and its columns' kinds."""
    name, cols = _TOPICS[topic % len(_TOPICS)]
    style = rng.randrange(4)
    if style == 1:
        name = f"{name.lower().replace(' ', '_')}_{rng.randint(1990, 2022)}"
    elif style == 2:
        name = f"{rng.choice(['Regional', 'National', 'Historic', 'Annual'])} {name}"
    keep = sorted(rng.sample(range(1, len(cols)), rng.randint(min(3, len(cols) - 1), len(cols) - 1)))
    if not any(_is_number(cols[i][1]) for i in keep):  # the ranking, aggregate and comparison tasks need a number
        keep = sorted({*keep[1:], next(i for i, c in enumerate(cols) if i and _is_number(c[1]))})
    cols = [cols[0], *(cols[i] for i in keep)]
    n_rows, rows, keys = rng.randint(8, 11), [], set()
    for _ in range(50 * n_rows):  # keys must be unique (lookups name one row); every key kind has > 11 values
        row = [_value(kind, rng) for _, kind in cols]
        if row[0] not in keys:
            keys.add(row[0])
            rows.append(row)
        if len(rows) == n_rows:
            break
    columns = [{"name": c, "type": "TEXT"} for c, _ in cols]  # AgentBench creates every column as TEXT
    return {"table_name": name, "table_info": {"columns": columns, "rows": rows}}, [k for _, k in cols]


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _label(table: dict, query: str) -> list[str]:
    """Return the gold query's result on the table as DB Bench labels (text, one value per cell)."""
    conn = build_database(table)
    try:
        rows = conn.execute(query).fetchall()
    except sqlite3.Error as exc:  # a generator bug, not bad input: fail loudly
        raise RuntimeError(f"synthetic gold query failed: {query}: {exc}") from exc
    finally:
        conn.close()
    return [str(round(v, 4)) if isinstance(v, float) else str(v) for row in rows for v in row]


def _tasks_for(table: dict, kinds: list[str], rng: random.Random) -> list[dict]:
    """Return the table's seven tasks as DB Bench records (without the table): 4 SELECT, INSERT, UPDATE, DELETE."""
    t, name = quote(table["table_name"]), table["table_name"]
    cols = [c["name"] for c in table["table_info"]["columns"]]
    rows = table["table_info"]["rows"]
    key = cols[0]
    # a year is a number but "the total Year" is not a question anyone asks: years only when nothing else is
    nums = [i for i, k in enumerate(kinds) if i and _is_number(k, years=False)] \
        or [i for i, k in enumerate(kinds) if i and _is_number(k)]
    pick = rng.choice(rows)
    a = rng.randrange(1, len(cols))
    n = rng.choice(nums)
    num = cols[n]
    # the grouping column: a text column, else another number (never the key: "a Club of X" names one row)
    cat = rng.choice([i for i, k in enumerate(kinds) if i and not _is_number(k)]
                     or [i for i in range(1, len(cols)) if i != n] or [n])
    anchor = rng.choice(rows)
    g = anchor[cat]
    q = quote
    select = [
        (rng.choice([f"What is the {cols[a]} of {pick[0]}?", f"What is the {cols[a]} when the {key} is {pick[0]}?",
                     f"Which {cols[a]} has a {key} of {pick[0]}?"]), "other",
         f"SELECT {q(cols[a])} FROM {t} WHERE {q(key)} = {_lit(pick[0])}"),
        (rng.choice([f"How many rows have a {cols[cat]} of {g}?",
                     f"What is the total number of {key} entries with {cols[cat]} {g}?"]), "counting",
         f"SELECT COUNT(*) FROM {t} WHERE {q(cols[cat])} = {_lit(g)}"),
    ]
    # a plain column where the env compares its all-number text as numbers (as MySQL does); thousands commas
    # ('64,798') make it text there, so those columns are cast as a careful query would
    cast = q(num) if all("," not in r[n] for r in rows) else f"CAST(REPLACE({q(num)}, ',', '') AS REAL)"
    if rng.random() < 0.5:
        low = rng.random() < 0.5
        select.append((rng.choice([f"Which {key} has the {'lowest' if low else 'highest'} {num}?",
                                   f"Name the {key} with the {'least' if low else 'most'} {num}."]),
                       "ranking", f"SELECT {q(key)} FROM {t} ORDER BY {cast} {'ASC' if low else 'DESC'}, "
                                  f"{q(key)} LIMIT 1"))
    else:
        fn, word = rng.choice([("MAX", "highest"), ("MIN", "lowest"), ("SUM", "total"), ("AVG", "average")])
        select.append((f"What is the {word} {num} when the {cols[cat]} is {g}?", f"aggregation-{fn}",
                       f"SELECT {fn}({cast}) FROM {t} WHERE {q(cols[cat])} = {_lit(g)}"))
    # a bound above the anchor row's value, so at least that row answers (an empty label teaches nothing)
    shown = f"{math.floor(float(anchor[n].replace(',', ''))) + rng.randint(1, 10):g}"
    select.append((f"Which {key} has a {cols[cat]} of {g} and a {num} smaller than {shown}?", "comparison",
                   f"SELECT {q(key)} FROM {t} WHERE {q(cols[cat])} = {_lit(g)} AND {cast} < {shown}"))
    records = [{"description": d, "type": [kind], "sql": {"query": s}, "label": _label(table, s)}
               for d, kind, s in select]

    new = [_value(k, rng) for k in kinds]
    new[0] = f"New {new[0]}" if new[0] in {r[0] for r in rows} else new[0]
    pairs = list(zip(cols, new, strict=True))
    listed = ", ".join(f"{c} {v}" for c, v in pairs[:-1]) + f" and {pairs[-1][0]} {pairs[-1][1]}"
    records.append({"type": ["INSERT"], "description": rng.choice([
        f"Insert a new record into the '{name}' table with the values of {listed}.",
        f"Insert data into the table named {name}, with values "
        + ", ".join(f"'{v}' for {c}" for c, v in pairs) + ".",
        f"Insert a new row into the '{name}' table with the following values: "
        + ", ".join(f"{c} as '{v}'" for c, v in pairs) + ".",
        f"Insert into table '{name}' with {len(cols)} columns " + ", ".join(f"'{c}'" for c in cols)
        + ". The values are " + ", ".join(f"'{v}'" for v in new) + "."]),
        "label": [f"INSERT INTO {t} ({', '.join(q(c) for c in cols)}) VALUES ({', '.join(_lit(v) for v in new)})"]})
    target = rng.choice(rows)
    col = rng.randrange(1, len(cols))
    value = _value(kinds[col], rng)
    records.append({"type": ["UPDATE"], "description": rng.choice([
        f"Update the {cols[col]} of {target[0]} in the '{name}' table to '{value}'.",
        f"Change the {cols[col]} in the {name} table to '{value}' where the {key} is '{target[0]}'.",
        f"In the '{name}' table, update the '{cols[col]}' column to '{value}' where the '{key}' column equals "
        f"{target[0]}.",
        f"Set the {cols[col]} value to {value} for the entry with {key} {target[0]}."]),
        "label": [f"UPDATE {t} SET {q(cols[col])} = {_lit(value)} WHERE {q(key)} = {_lit(target[0])}"]})
    gone = rng.choice(rows)
    records.append({"type": ["DELETE"], "description": rng.choice([
        f"Delete the row of {gone[0]} from the '{name}' table.",
        f"Remove every entry in {name} whose {key} is '{gone[0]}'."]),
        "label": [f"DELETE FROM {t} WHERE {q(key)} = {_lit(gone[0])}"]})
    return records


def synthetic_sql_tasks(n_tables: int = 20, seed: int = 0) -> list[dict]:
    """Return task rows (as load_dbbench would) for ``n_tables`` random tables (the topics in turn, names and
    columns varied), seven tasks each (four SELECT, then INSERT, UPDATE, DELETE), ids ``syn_<table>_<task>`` (seed 0)
    or ``syn<seed>_<table>_<task>``: two seeds never share an id."""
    rng = random.Random(seed)
    out = []
    for i in range(n_tables):
        table, kinds = _table(rng, i)
        note = (f"The name of this table is {table['table_name']}, and the headers of this table are "
                f"{','.join(c['name'] for c in table['table_info']['columns'])}.")
        for j, rec in enumerate(_tasks_for(table, kinds, rng)):
            rec = {**rec, "table": table, "add_description": note, "source": "synthetic"}
            out.append(dbbench_row(rec, f"syn{seed or ''}_{i}_{j}"))
    return out
