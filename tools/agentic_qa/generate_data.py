#!/usr/bin/env python3
"""Generate the agentic QA task: a fictional knowledge base and gold ReAct trajectories.

Each split (train, val, test) has its own world of fictional people and cities, so the
test split uses entities never seen in training. A question needs one to three lookups
and sometimes a subtraction. Gold trajectories have three agent roles (planner, actor,
reflector) plus tool turns. Half of the trajectories end with a deliberately wrong
Finish answer (that actor turn is marked train=false) so the reflector's verdict is a
real judgement. Output is deterministic for a given --seed.

usage: generate_data.py [--out assets/agentic_qa] [--seed 1234] [--train 1500] ...
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA_DIR, SYSTEM_PROMPT, Turn, render  # noqa: E402

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
          "gr", "kr", "tr", "st", "th", "sh", "qu"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"]
CODAS = ["", "", "", "n", "r", "l", "s", "k", "m", "th"]
JOBS = ["potter", "baker", "weaver", "sailor", "miner", "farmer", "tailor", "mason",
        "painter", "singer", "doctor", "builder", "teacher", "fisher", "hunter", "smith"]


def syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def word(rng: random.Random, n: int) -> str:
    return "".join(syllable(rng) for _ in range(n)).capitalize()


@dataclass
class Person:
    name: str
    born: int
    city: str
    job: str


@dataclass
class City:
    name: str
    founded: int
    mayor: str


@dataclass
class World:
    people: dict[str, Person]
    cities: dict[str, City]

    def document(self, name: str) -> str | None:
        """The Lookup tool: the document about an entity, or None."""
        if name in self.people:
            p = self.people[name]
            return f"{p.name}: born {p.born}, lives in {p.city}, works as {p.job}."
        if name in self.cities:
            c = self.cities[name]
            return f"{c.name}: city founded {c.founded}, mayor {c.mayor}."
        return None


def make_world(rng: random.Random, used: set[str], num_people: int, num_cities: int) -> World:
    """A world with fresh names (never in `used`); every city's mayor is one of its people."""
    def fresh(make: Any) -> str:
        while True:
            n = make()
            if n not in used and all(part not in used for part in n.split()):
                used.add(n)
                for part in n.split():
                    used.add(part)
                return n

    city_names = [fresh(lambda: word(rng, 2)) for _ in range(num_cities)]
    people: dict[str, Person] = {}
    for _ in range(num_people):
        n = fresh(lambda: word(rng, 1) + " " + word(rng, 2))
        people[n] = Person(n, rng.randint(1700, 1990), rng.choice(city_names), rng.choice(JOBS))
    names = list(people)
    cities = {}
    for c in city_names:
        residents = [p for p in names if people[p].city == c] or names
        cities[c] = City(c, rng.randint(1100, 1690), rng.choice(residents))
    return World(people, cities)


def calc(expr: str) -> str:
    """The Calculate tool: integer arithmetic on `a op b` expressions (op in + - *)."""
    parts = expr.split()
    if len(parts) != 3 or parts[1] not in "+-*" or not all(p.lstrip("-").isdigit() for p in parts[::2]):
        return "Error: cannot calculate."
    a, op, b = int(parts[0]), parts[1], int(parts[2])
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


def make_question(rng: random.Random, w: World, kind: int) -> dict[str, Any]:
    """A question of template `kind` (0..8): text, answer, and the gold action plan."""
    names = sorted(w.people)
    p = w.people[rng.choice(names)]
    c = w.cities[p.city]
    if kind == 0:
        return dict(q=f"What year was {p.name} born?", a=str(p.born), plan=[("L", p.name)])
    if kind == 1:
        return dict(q=f"In which city does {p.name} live?", a=p.city, plan=[("L", p.name)])
    if kind == 2:
        return dict(q=f"What is the job of {p.name}?", a=p.job, plan=[("L", p.name)])
    if kind == 3:
        return dict(q=f"In what year was the city where {p.name} lives founded?", a=str(c.founded),
                    plan=[("L", p.name), ("L", c.name)])
    if kind == 4:
        return dict(q=f"Who is the mayor of the city where {p.name} lives?", a=c.mayor,
                    plan=[("L", p.name), ("L", c.name)])
    if kind == 5:
        q = w.people[rng.choice([n for n in names if n != p.name])]
        hi, lo = max(p.born, q.born), min(p.born, q.born)
        return dict(q=f"How many years apart were {p.name} and {q.name} born?", a=str(hi - lo),
                    plan=[("L", p.name), ("L", q.name), ("C", f"{hi} - {lo}")])
    if kind == 6:
        y = p.born + rng.randint(5, 90)
        return dict(q=f"How old was {p.name} in {y}?", a=str(y - p.born),
                    plan=[("L", p.name), ("C", f"{y} - {p.born}")])
    if kind == 7:
        m = w.people[c.mayor]
        return dict(q=f"What is the job of the mayor of the city where {p.name} lives?", a=m.job,
                    plan=[("L", p.name), ("L", c.name), ("L", m.name)])
    return dict(q=f"How many years after its city was founded was {p.name} born?",
                a=str(p.born - c.founded), plan=[("L", p.name), ("L", c.name), ("C", f"{p.born} - {c.founded}")])


def wrong_answer(rng: random.Random, w: World, kind: int, answer: str, seen: str) -> str:
    """A plausible wrong answer that does not occur in the trajectory text `seen`."""
    for _ in range(100):
        if answer.lstrip("-").isdigit():
            cand = str(int(answer) + rng.choice([-1, 1]) * rng.randint(1, 12))
        elif kind == 1:
            cand = rng.choice(sorted(w.cities))
        elif kind == 4:
            cand = rng.choice(sorted(w.people))
        else:
            cand = rng.choice(JOBS)
        if cand != answer and cand not in seen:
            return cand
    raise RuntimeError("no wrong answer found")


def trajectory(rng: random.Random, w: World, qd: dict[str, Any], kind: int, wrong: bool) -> list[Turn]:
    """The gold turns for a question; `wrong` makes the actor's Finish deliberately wrong."""
    turns = [Turn("system", SYSTEM_PROMPT), Turn("user", qd["q"])]
    for act, arg in qd["plan"]:
        if act == "L":
            turns.append(Turn("planner", f"Thought: look up {arg}.\nAction: Lookup"))
            turns.append(Turn("actor", f"Lookup[{arg}]"))
            doc = w.document(arg)
            assert doc is not None
            turns.append(Turn("tool", doc))
        else:
            turns.append(Turn("planner", "Thought: subtract the years.\nAction: Calculate"))
            turns.append(Turn("actor", f"Calculate[{arg}]"))
            turns.append(Turn("tool", calc(arg)))
    turns.append(Turn("planner", "Thought: I know the answer.\nAction: Finish"))
    answer = qd["a"]
    if wrong:
        given = wrong_answer(rng, w, kind, answer, render(turns))
        turns.append(Turn("actor", f"Finish[{given}]", train=False))
        turns.append(Turn("reflector", f"Given: {given}. Expected: {answer}.\nVerdict: wrong."))
    else:
        turns.append(Turn("actor", f"Finish[{answer}]"))
        turns.append(Turn("reflector", f"Given: {answer}. Expected: {answer}.\nVerdict: right."))
    return turns


def make_split(rng: random.Random, w: World, n: int, split: str) -> list[dict[str, Any]]:
    """n records; question kinds cycle so every template is equally frequent."""
    recs = []
    for i in range(n):
        kind = i % 9
        qd = make_question(rng, w, kind)
        wrong = rng.random() < 0.5
        turns = trajectory(rng, w, qd, kind, wrong)
        recs.append(dict(id=f"{split}-{i:05d}", split=split, kind=kind, question=qd["q"], answer=qd["a"],
                         finish_correct=not wrong,
                         turns=[dict(role=t.role, text=t.text, **({} if t.train else {"train": False}))
                                for t in turns]))
    rng.shuffle(recs)
    return recs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--train", type=int, default=1800, help="train trajectories")
    ap.add_argument("--val", type=int, default=180)
    ap.add_argument("--test", type=int, default=360)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    used: set[str] = set()
    worlds = {"train": make_world(rng, used, 160, 32), "val": make_world(rng, used, 48, 10),
              "test": make_world(rng, used, 80, 16)}
    args.out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", args.train), ("val", args.val), ("test", args.test)):
        w = worlds[split]
        kb = [dict(name=k, document=w.document(k)) for k in sorted(w.people) + sorted(w.cities)]
        with open(args.out / f"kb_{split}.jsonl", "w", encoding="utf-8") as f:
            for r in kb:
                f.write(json.dumps(r, sort_keys=True) + "\n")
        recs = make_split(rng, w, n, split)
        with open(args.out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, sort_keys=True) + "\n")
        print(f"{split}: {len(recs)} trajectories, {len(kb)} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
