"""Synthetic SQL tasks in DB Bench's format, for training: DB Bench itself is for evaluation only.

Small tables generated from a seed (cities, products, matches; one key column, one grouping column, two
numeric columns) with SELECT tasks (lookup, counting, aggregation, ranking: scored by the label) and
INSERT/UPDATE/DELETE tasks (gold statement in ``metadata.sql``, scored by the final table state), seven per
table, so SFT demonstrations and GRPO runs on the SQL environment never touch the evaluation data.
"""

from __future__ import annotations

import random

from agentrl.envs.sql import dbbench_row, quote

_CITIES = ["Arden", "Brisa", "Calder", "Dunmore", "Elmira", "Farrow", "Galen", "Harlow", "Islay", "Jorvik",
           "Kestrel", "Lumen", "Marlow", "Norrin", "Oakes", "Pell"]
_COUNTRIES = ["Norland", "Sudria", "Estmark", "Westerra"]
_PRODUCTS = ["lamp", "kettle", "chair", "desk", "mug", "shelf", "clock", "rug", "vase", "stool", "fan", "mirror"]
_CATEGORIES = ["kitchen", "living room", "office"]
_ROUNDS = ["group stage", "quarter-final", "semi-final"]


def _cities(rng: random.Random) -> dict:
    names = rng.sample(_CITIES, 10)
    rows = [[n, rng.choice(_COUNTRIES), str(rng.randrange(20_000, 900_000, 500)), str(rng.randint(1200, 1950))]
            for n in names]
    cols = [{"name": "City", "type": "TEXT"}, {"name": "Country", "type": "TEXT"},
            {"name": "Population", "type": "INT"}, {"name": "Year founded", "type": "INT"}]
    return {"table_name": "City Registry", "table_info": {"columns": cols, "rows": rows}}


def _products(rng: random.Random) -> dict:
    names = rng.sample(_PRODUCTS, 10)
    rows = [[n, rng.choice(_CATEGORIES), f"{rng.randint(5, 300)}.{rng.choice(['00', '50', '99'])}",
             str(rng.randint(0, 60))] for n in names]
    cols = [{"name": "Product", "type": "TEXT"}, {"name": "Category", "type": "TEXT"},
            {"name": "Unit price", "type": "FLOAT"}, {"name": "In stock", "type": "INT"}]
    return {"table_name": "Shop Inventory", "table_info": {"columns": cols, "rows": rows}}


def _matches(rng: random.Random) -> dict:
    teams = rng.sample(_CITIES, 10)
    # each team hosts once, so the fixture names (the key column) are unique
    rows = [[f"{home} v {away}", rng.choice(_ROUNDS), str(rng.randrange(500, 60_000, 50)), str(rng.randint(0, 7))]
            for home, away in zip(teams, teams[1:] + teams[:1], strict=True)]
    cols = [{"name": "Fixture", "type": "TEXT"}, {"name": "Round", "type": "TEXT"},
            {"name": "Attendance", "type": "INT"}, {"name": "Goals scored", "type": "INT"}]
    return {"table_name": "Cup Matches", "table_info": {"columns": cols, "rows": rows}}


_TABLES = (_cities, _products, _matches)


def _tasks_for(table: dict, rng: random.Random) -> tuple[list[dict], str]:
    """Return the table's seven tasks (DB Bench records without the table) and its note for the question."""
    t = quote(table["table_name"])
    cols = [c["name"] for c in table["table_info"]["columns"]]
    rows = table["table_info"]["rows"]
    key, group, num, num2 = cols
    pick = rng.choice(rows)
    g = pick[1]
    in_group = [r for r in rows if r[1] == g]
    top = min(rows, key=lambda r: (-float(r[2]), r[0]))  # ties broken by key, as the gold query does
    note = (f"The name of this table is {table['table_name']}, and the headers of this table are "
            f"{','.join(cols)}.")
    new_key = f"New {pick[0]}"
    gone = rng.choice(rows)[1]  # a group to delete; may be pick's own
    return [
        {"description": f"What is the {num.lower()} of {pick[0]}?", "label": [pick[2]], "type": ["other"],
         "sql": {"query": f"SELECT {quote(num)} FROM {t} WHERE {quote(key)} = '{pick[0]}'"}},
        {"description": f"How many rows have {group.lower()} {g}?", "label": [str(len(in_group))],
         "type": ["counting"], "sql": {"query": f"SELECT COUNT(*) FROM {t} WHERE {quote(group)} = '{g}'"}},
        {"description": f"Which {key.lower()} has the highest {num.lower()}?", "label": [top[0]], "type": ["ranking"],
         "sql": {"query": f"SELECT {quote(key)} FROM {t} ORDER BY {quote(num)} DESC, {quote(key)} LIMIT 1"}},
        {"description": f"What is the total {num2.lower()} for {group.lower()} {g}?",
         "label": [str(sum(int(float(r[3])) for r in in_group))], "type": ["aggregation-SUM"],
         "sql": {"query": f"SELECT SUM({quote(num2)}) FROM {t} WHERE {quote(group)} = '{g}'"}},
        {"description": f"Set the {num2.lower()} of {pick[0]} to {int(float(pick[3])) + 7}.", "type": ["UPDATE"],
         "label": [f"UPDATE {t} SET {quote(num2)} = {int(float(pick[3])) + 7} WHERE {quote(key)} = '{pick[0]}'"]},
        {"description": f"Insert {new_key} with {group.lower()} {g}, {num.lower()} {pick[2]} and "
                        f"{num2.lower()} {pick[3]}.", "type": ["INSERT"],
         "label": [f"INSERT INTO {t} ({', '.join(quote(c) for c in cols)}) VALUES "
                   f"('{new_key}', '{g}', {pick[2]}, {pick[3]})"]},
        {"description": f"Delete every row with {group.lower()} {gone}.", "type": ["DELETE"],
         "label": [f"DELETE FROM {t} WHERE {quote(group)} = '{gone}'"]},
    ], note


def synthetic_sql_tasks(n_tables: int = 20, seed: int = 0) -> list[dict]:
    """Return task rows (as load_dbbench would) for ``n_tables`` random tables (cities, products, matches in
    turn), seven tasks each (four SELECT, then UPDATE, INSERT, DELETE), ids ``syn_<table>_<task>``."""
    rng = random.Random(seed)
    out = []
    for i in range(n_tables):
        table = _TABLES[i % len(_TABLES)](rng)
        tasks, note = _tasks_for(table, rng)
        for j, rec in enumerate(tasks):
            rec = {**rec, "table": table, "add_description": note, "source": "synthetic"}
            out.append(dbbench_row(rec, f"syn_{i}_{j}"))
    return out
