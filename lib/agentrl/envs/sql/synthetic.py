"""Synthetic SQL tasks in DB Bench's format, for training: DB Bench itself is for evaluation only.

Each table is drawn from one of twenty-four topics (league standings, shipwrecks, radio stations, ...) with a
randomised name (``Football Standings``, ``football_standings_2011``, ``Regional Football Standings``), 5-8 columns
whose headers are written as wiki tables write them (``Height (m)``, ``Runner-up``, ``No. in series``, ``1st leg``),
15-40 rows of names, places, seasons, dates, scores and numbers stored as text (``'64,798'``, ``'7.400'``,
``'2010-11'``, ``'99.8%'``; some names carry an apostrophe, ``O'Neill``). Seven tasks per table, phrased the ways
DB Bench phrases them: two or three SELECT tasks (lookup, counting, a ranking or an aggregate, a comparison: labels
computed by running the gold query on the table) and INSERTs and UPDATEs for the rest (an UPDATE sets one to three
columns; scored by the table hash of the gold statement's result, as AgentBench scores them). The shape follows DB
Bench dev's (two thirds writes, no DELETE, wide tables of 15-40 rows, headers with spaces and punctuation:
``benchmarks/sql_shape.py`` prints each feature's ratio) without its tables, questions or values. Variety is the
point: a model trained on three fixed tables learns their names; one trained on these must read the table name and
headers from the question.

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
          "Nils", "Olga", "Pablo", "Rosa", "Sam", "Tara", "Viktor", "Wendy", "Yusuf", "Aiko", "Bruno", "Chidi",
          "Dana", "Emil", "Farah", "Gustav", "Helena"]
_LAST = ["Adams", "Berg", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ivanova", "Jensen", "Kowalski",
         "Lopez", "Moreau", "Novak", "O'Neill", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka", "D'Angelo", "Weber",
         "Achebe", "Lindqvist", "Mbeki", "Okafor", "Van der Berg", "Yamamoto", "Zielinski", "MacLeod"]
_CITIES = ["Arden", "Brisa", "Calder", "Dunmore", "Elmira", "Farrow", "Galen", "Harlow", "Islay", "Jorvik", "Kestrel",
           "Lumen", "Marlow", "Norrin", "Oakes", "Pell", "Quarry Bay", "Rivermouth", "Saltash", "Thornby", "Ashcombe",
           "Bellhaven", "Cragmoor", "Dovecote", "Eastwick", "Fernhill", "Greystone", "Hollowell", "Ironbridge",
           "Kingsmere", "Larkspur", "Millbrook", "New Arden", "Port Ellis", "Redcliffe", "Stonehaven", "Upper Pell",
           "Westmoor", "Yarrow Falls", "Zeal Monachorum"]
_COUNTRIES = ["Norland", "Sudria", "Estmark", "Westerra", "Corvia", "Maravia", "Ostland", "Valdora", "Brenmark",
              "Istria Nova", "Kaledon", "Lorvania", "Montelda", "Pravia", "Rhosland", "Tervia", "Aldoria", "Belmora",
              "Cascadia", "Drevania", "Elbonia", "Fenmark", "Gallivant", "Hesperia", "Ilyria", "Jastrov", "Kovania",
              "Luminia", "Novaria", "Orlesia", "Pellucia", "Quorvia", "San Veritas", "Tamaris", "Ulmeria",
              "Vesteros", "Wyndham Isles", "Zarovia"]
_WORDS = ["Silver", "Northern", "Red", "Quiet", "Golden", "Last", "Hidden", "Iron", "Blue", "Distant", "Broken", "Wild",
          "Crimson", "Lonely", "Bright", "Endless", "Secret", "Velvet"]
_NOUNS = ["River", "Harbor", "Garden", "Signal", "Summer", "Lantern", "Crown", "Horizon", "Orchard", "Echo", "Bridge",
          "Meadow", "Compass", "Tide", "Winter", "Canyon"]
_TEAM_SUFFIX = ["United", "City", "Rovers", "Athletic", "Wanderers", "FC", "Town", "Albion", "Rangers"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]


def _date(rng: random.Random) -> str:
    day, month, year = rng.randint(1, 28), rng.choice(_MONTHS), rng.randint(1950, 2023)
    return f"{month} {day}, {year}" if rng.random() < 0.7 else f"{day} {month} {year}"


def _season(rng: random.Random) -> str:
    year = rng.randint(1950, 2022)
    return f"{year}-{(year + 1) % 100:02d}"


# one cell of each kind as DB Bench stores it: text (numbers with thousands commas, dates, seasons, percentages)
_KINDS = {
    "person": lambda r: f"{r.choice(_FIRST)} {r.choice(_LAST)}",
    "title": lambda r: f"{r.choice(['', '', 'The '])}{r.choice(_WORDS)} {r.choice(_NOUNS)}",
    "city": lambda r: r.choice(_CITIES),
    "country": lambda r: r.choice(_COUNTRIES),
    "team": lambda r: f"{r.choice(_CITIES)} {r.choice(_TEAM_SUFFIX)}",
    "venue": lambda r: f"{r.choice(_CITIES)} {r.choice(['Stadium', 'Arena', 'Park', 'Ground', 'Field'])}",
    "ship": lambda r: f"{r.choice(['SS', 'HMS', 'MV'])} {r.choice(_WORDS)} {r.choice(_NOUNS)}",
    "company": lambda r: f"{r.choice(_WORDS)} {r.choice(['Systems', 'Foods', 'Motors', 'Energy', 'Media', 'Records'])}",
    "school": lambda r: f"{r.choice(_CITIES)} {r.choice(['High School', 'Academy', 'Grammar School', 'College'])}",
    "university": lambda r: r.choice(["University of {}", "{} Institute of Technology", "{} University"]).format(
        r.choice(_CITIES)),
    "station": lambda r: f"{r.choice(_CITIES)} {r.choice(['Central', 'North', 'Junction', 'Road', 'Parkway'])}",
    "peak": lambda r: r.choice([f"Mount {r.choice(_NOUNS)}", f"{r.choice(_WORDS)} Peak", f"{r.choice(_NOUNS)} Spire"]),
    "bridge": lambda r: f"{r.choice(_WORDS)} {r.choice(_NOUNS)} Bridge",
    "river": lambda r: f"{r.choice(_WORDS)} {r.choice(['River', 'Water', 'Brook'])}",
    "grand_prix": lambda r: f"{r.choice(_COUNTRIES)} Grand Prix",
    "tour": lambda r: f"{r.choice(_WORDS)} {r.choice(_NOUNS)} Tour",
    "year": lambda r: str(r.randint(1950, 2023)),
    "small": lambda r: str(r.randint(0, 40)),
    "rank": lambda r: str(r.randint(1, 30)),
    "big": lambda r: f"{r.randint(1_000, 99_999):,}",
    "count": lambda r: str(r.randint(100, 9_999)),
    "float": lambda r: f"{r.uniform(1, 99):.3f}",
    "share": lambda r: f"{r.uniform(1, 60):.1f}",
    "percent": lambda r: f"{r.uniform(-12, 99):.1f}%",
    "money": lambda r: f"${r.randint(10, 9_000) * 1_000:,}",
    "date": _date,
    "season": _season,
    "score": lambda r: f"{r.randint(0, 6)}-{r.randint(0, 6)}",
    "record": lambda r: f"{r.randint(0, 16)}-{r.randint(0, 16)}",
    "result": lambda r: f"{r.choice('WL')} {r.randint(3, 45)}-{r.randint(0, 40)}",
    "duration": lambda r: f"{r.randint(80, 190)} min",
    "code": lambda r: f"{r.choice('ABCDKLST')}{r.randint(1, 9)}{r.randint(0, 99):02d}",
    "callsign": lambda r: "K" + "".join(r.choice("ABCDEFGHJKLMNPRSTWXZ") for _ in range(3)),
}


def _value(kind, rng: random.Random) -> str:
    """Return one cell of the given kind (a list: one of its values) as DB Bench stores it: text."""
    return rng.choice(kind) if isinstance(kind, list) else _KINDS[kind](rng)


# topic: (table name, columns as (header, kind)); the first column is the row key (unique), a list is a category
_TOPICS = [
    ("Football Standings", [("Club", "team"), ("Stadium", "venue"), ("Manager", "person"), ("Played", "small"),
                            ("Won", "small"), ("Lost", "small"), ("Points", "small"), ("Record (W-L)", "record")]),
    ("Medal Table", [("Nation", "country"), ("Capital", "city"), ("Gold", "small"), ("Silver", "small"),
                     ("Bronze", "small"), ("Total", "small"), ("Best event", ["Rowing", "Athletics", "Judo", "Cycling",
                                                                             "Swimming"])]),
    ("Tallest Buildings", [("Building", "title"), ("City", "city"), ("Country", "country"), ("Floors", "small"),
                           ("Height (m)", "float"), ("Year completed", "year"), ("Architect", "person")]),
    ("Film Releases", [("Title", "title"), ("Director", "person"), ("Release date", "date"), ("Studio", "company"),
                       ("Box office ($)", "big"), ("Rating", ["G", "PG", "PG-13", "R"]), ("Running time", "duration")]),
    ("Election Results", [("Candidate", "person"), ("Party", ["Liberal", "Labour", "Green", "Independent"]),
                          ("Constituency", "city"), ("Votes", "big"), ("Share (%)", "share"), ("Swing", "percent"),
                          ("Result", ["Elected", "Defeated", "Re-elected"])]),
    ("Shipwrecks", [("Ship", "ship"), ("Date sunk", "date"), ("Nationality", "country"), ("Tonnage (GRT)", "big"),
                    ("Fate", ["Sunk", "Damaged", "Captured", "Scuttled"]), ("Location", "city"),
                    ("Lives lost", "count")]),
    ("Race Results", [("Grand Prix", "grand_prix"), ("Circuit", "venue"), ("Date", "date"), ("Pole position", "person"),
                      ("Fastest lap", "person"), ("Winning driver", "person"), ("Winning team", "team"),
                      ("Laps", "small")]),
    ("Album Chart", [("Album", "title"), ("Artist", "person"), ("Label", "company"), ("Year", "year"),
                     ("Peak position", "rank"), ("Weeks in top 40", "small"),
                     ("Certification", ["Gold", "Platinum", "2x Platinum", "Silver"])]),
    ("School Directory", [("School", "school"), ("Location", "city"), ("Founded", "year"), ("Enrollment", "count"),
                          ("Type", ["Public", "Private", "Charter"]), ("Principal", "person"),
                          ("Mascot", ["Eagles", "Lions", "Hornets", "Falcons", "Wolves"])]),
    ("Tennis Champions", [("Year", "year"), ("Champion", "person"), ("Runner-up", "person"),
                          ("Score in the final", "score"), ("Venue", "city"), ("Prize money ($)", "big"),
                          ("Surface", ["Clay", "Grass", "Hard", "Carpet"])]),
    ("Radio Stations", [("Call sign", "callsign"), ("Frequency (MHz)", "float"), ("City of license", "city"),
                        ("ERP (W)", "count"), ("Format", ["News", "Country", "Rock", "Talk", "Classic hits"]),
                        ("Owner", "company"), ("First air date", "date")]),
    ("Episode Guide", [("Title", "title"), ("No. in series", "small"), ("Directed by", "person"),
                       ("Written by", "person"), ("Original air date", "date"), ("Production code", "code"),
                       ("U.S. viewers (millions)", "float")]),
    ("Player Statistics", [("Player", "person"), ("Position", ["Forward", "Midfielder", "Defender", "Goalkeeper"]),
                           ("Nationality", "country"), ("Games", "small"), ("Goals", "small"), ("Assists", "small"),
                           ("Minutes", "count")]),
    ("Company Revenue", [("Company", "company"), ("Industry", ["Retail", "Energy", "Media", "Transport"]),
                         ("Headquarters", "city"), ("Revenue ($M)", "big"), ("Employees", "count"), ("CEO", "person"),
                         ("Market share", "percent")]),
    ("Mountain Peaks", [("Peak", "peak"), ("Country", "country"), ("Range", ["Northern Range", "High Spine",
                                                                             "Coastal Ridge", "Ironcrest"]),
                        ("Elevation (m)", "count"), ("Prominence", "count"), ("First ascent", "year"),
                        ("First climbed by", "person")]),
    ("Train Stations", [("Station", "station"), ("Line", ["Red", "Blue", "Green", "Yellow"]), ("Opened", "year"),
                        ("Passengers (2019)", "big"), ("Platforms", "small"), ("Borough", "city"),
                        ("Interchange", ["Yes", "No"])]),
    ("Award Winners", [("Film", "title"), ("Year", "year"), ("Category", ["Best Actor", "Best Director", "Best Score",
                                                                          "Best Picture"]),
                       ("Winner", "person"), ("Nominations", "small"), ("Studio", "company"),
                       ("Outcome", ["Won", "Nominated"])]),
    ("Game Schedule", [("Date", "date"), ("Week", "small"), ("Opponent", "team"), ("Result", "result"),
                       ("Game site", "venue"), ("Attendance", "big"), ("Record", "record")]),
    ("University Rankings", [("University", "university"), ("Country", "country"), ("Rank", "rank"),
                             ("Overall score", "float"), ("Founded", "year"), ("Students", "count"),
                             ("Type", ["Public", "Private"])]),
    ("Bridge Registry", [("Bridge", "bridge"), ("Crosses", "river"), ("Length (m)", "count"),
                         ("Main span", "count"), ("Opened", "year"), ("Type", ["Suspension", "Arch", "Beam"]),
                         ("Designer", "person")]),
    ("Season Records", [("Season", "season"), ("League", ["Premier", "Division One", "Division Two"]),
                        ("Position", "rank"), ("Record", "record"), ("Head coach", "person"), ("Top scorer", "person"),
                        ("Playoffs", ["Did not qualify", "Quarter-finals", "Semi-finals", "Final", "Champions"])]),
    ("Draft Picks", [("Player", "person"), ("Pick #", "rank"), ("Round", "small"), ("Position", ["Guard", "Forward",
                                                                                                 "Center"]),
                     ("Team", "team"), ("College", "university"), ("Nationality", "country")]),
    ("Cup Results", [("Home team", "team"), ("Score", "score"), ("Away team", "team"), ("Venue", "venue"),
                     ("Date", "date"), ("Attendance", "big"), ("1st leg", "score"), ("2nd leg", "score")]),
    ("Concert Tours", [("Tour", "tour"), ("Artist", "person"), ("Start date", "date"), ("Shows", "small"),
                       ("Gross", "money"), ("Attendance", "big"), ("Continent(s)", ["Europe", "North America",
                                                                                    "Asia", "Worldwide"])]),
]
_NUMERIC = {"small", "rank", "big", "count", "float", "share", "year"}


def _is_number(kind, years: bool = True) -> bool:
    return isinstance(kind, str) and kind in _NUMERIC and (years or kind != "year")


def _table(rng: random.Random, topic: int) -> tuple[dict, list[str]]:
    """Return a DB Bench ``table`` dict (a randomised name, 5-8 columns, 15-40 rows: fewer when the key's kind has
    fewer values) and its columns' kinds."""
    name, cols = _TOPICS[topic % len(_TOPICS)]
    style = rng.randrange(4)
    if style == 1:
        name = f"{name.lower().replace(' ', '_')}_{rng.randint(1990, 2022)}"
    elif style == 2:
        name = f"{rng.choice(['Regional', 'National', 'Historic', 'Annual'])} {name}"
    keep = sorted(rng.sample(range(1, len(cols)), rng.randint(4, len(cols) - 1)))
    if not any(_is_number(cols[i][1]) for i in keep):  # the ranking, aggregate and comparison tasks need a number
        keep = sorted({*keep[1:], next(i for i, c in enumerate(cols) if i and _is_number(c[1]))})
    cols = [cols[0], *(cols[i] for i in keep)]
    n_rows, rows, keys = rng.randint(15, 40), [], set()
    for _ in range(50 * n_rows):  # keys must be unique (lookups name one row)
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


def _selects(table: dict, kinds: list[str], rng: random.Random) -> list[tuple[str, str, str]]:
    """Return the table's four SELECT tasks as (description, type, gold query): a lookup, a count, a ranking or an
    aggregate, a comparison."""
    t = quote(table["table_name"])
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
    return select


def _insert(table: dict, kinds: list[str], rng: random.Random) -> dict:
    """Return an INSERT task: a new row (a key no row has), described one of DB Bench's ways."""
    name, t = table["table_name"], quote(table["table_name"])
    cols = [c["name"] for c in table["table_info"]["columns"]]
    keys = {r[0] for r in table["table_info"]["rows"]}
    new = [_value(k, rng) for k in kinds]
    new[0] = f"New {new[0]}" if new[0] in keys else new[0]
    pairs = list(zip(cols, new, strict=True))
    listed = ", ".join(f"{c} {v}" for c, v in pairs[:-1]) + f" and {pairs[-1][0]} {pairs[-1][1]}"
    return {"type": ["INSERT"], "description": rng.choice([
        f"Insert a new record into the '{name}' table with the values of {listed}.",
        f"Insert data into the table named {name}, with values " + ", ".join(f"'{v}' for {c}" for c, v in pairs) + ".",
        f"Insert a new row into the '{name}' table with the following values: "
        + ", ".join(f"{c} as '{v}'" for c, v in pairs) + ".",
        f"Insert into table '{name}' with {len(cols)} columns " + ", ".join(f"'{c}'" for c in cols)
        + ". The values are " + ", ".join(f"'{v}'" for v in new) + ".",
        f"Insert '{new[0]}' into '{name}' with values " + ", ".join(f"'{v}' for '{c}'" for c, v in pairs[1:-1])
        + f", and '{pairs[-1][1]}' for '{pairs[-1][0]}'."]),
        "label": [f"INSERT INTO {t} ({', '.join(quote(c) for c in cols)}) VALUES ({', '.join(_lit(v) for v in new)})"]}


def _update(table: dict, kinds: list[str], rng: random.Random) -> dict:
    """Return an UPDATE task: one to three columns of one row set to new values (the row named by its key, now and
    then by its key and another of its cells), described one of DB Bench's ways."""
    name, t = table["table_name"], quote(table["table_name"])
    cols = [c["name"] for c in table["table_info"]["columns"]]
    key, target = cols[0], rng.choice(table["table_info"]["rows"])
    n_set = min(len(cols) - 1, rng.choices((1, 2, 3), weights=(5, 3, 2))[0])
    sets = [(cols[i], _value(kinds[i], rng)) for i in sorted(rng.sample(range(1, len(cols)), n_set))]
    where = [(key, target[0])]
    if rng.random() < 0.25:  # a second condition on a column the update leaves alone
        rest = [i for i in range(1, len(cols)) if cols[i] not in dict(sets)]
        if rest:
            i = rng.choice(rest)
            where.append((cols[i], target[i]))
    said = " and ".join(f"the {c} to '{v}'" for c, v in sets)
    cond = " and ".join(f"the {c} is '{v}'" for c, v in where)
    description = rng.choice([
        f"Update {said} in the '{name}' table where {cond}.",
        f"In the '{name}' table, set {said} for the entry where {cond}.",
        f"Change {said} in the {name} table where {cond}.",
        f"For {target[0]}, update the {name} table so that " + " and ".join(f"{c} is '{v}'" for c, v in sets)
        + (f" (the row whose {where[1][0]} is '{where[1][1]}')." if len(where) > 1 else ".")])
    statement = (f"UPDATE {t} SET {', '.join(f'{quote(c)} = {_lit(v)}' for c, v in sets)} WHERE "
                 + " AND ".join(f"{quote(c)} = {_lit(v)}" for c, v in where))
    return {"type": ["UPDATE"], "description": description, "label": [statement]}


def _tasks_for(table: dict, kinds: list[str], rng: random.Random) -> list[dict]:
    """Return the table's seven tasks as DB Bench records (without the table): two or three SELECTs (in the order
    lookup, count, ranking or aggregate, comparison), then INSERTs and UPDATEs in turn."""
    select = _selects(table, kinds, rng)
    chosen = sorted(rng.sample(range(len(select)), rng.choice((2, 3))))
    records = [{"description": d, "type": [kind], "sql": {"query": s}, "label": _label(table, s)}
               for d, kind, s in (select[i] for i in chosen)]
    first = rng.randrange(2)
    for j in range(7 - len(records)):
        records.append((_insert, _update)[(first + j) % 2](table, kinds, rng))
    return records


def synthetic_sql_tasks(n_tables: int = 20, seed: int = 0) -> list[dict]:
    """Return task rows (as load_dbbench would) for ``n_tables`` random tables (the topics in turn, names and
    columns varied), seven tasks each (two or three SELECTs, then INSERTs and UPDATEs), ids ``syn_<table>_<task>``
    (seed 0) or ``syn<seed>_<table>_<task>``: two seeds never share an id."""
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
