"""The claims ledger: every claim and every reported number of the five sources, as data
(claims/<task>.yaml), and each claim's verdict on a profile's runs.

A ledger entry says where the claim stands in its source, the claim in our words, its kind, the
number with its spread where the source gives one, and the settings it was measured at; then one
of:
- `kind: setting` and `here`: a fact of the source's setup (a value, an equation, a format),
  followed or departed from as `here` says; no verdict;
- `test`: what tests it, in which profiles: a finding of the task (`finding`, its id), or the
  source's number against our mean over seeds (`metric` of the runs `cell` selects, within
  ± `tolerance`, arithrepro/stats.against); `differs` says how our setting differs;
- `untested`: why no profile tests it (`why`) and what testing it would take (`cost`).

A verdict is one word of findings.OUTCOMES, computed here from the records and the findings'
verdicts; claims tested only by the `modular-source` target take their verdict from
docs/modular-source.json (`make modular-source` writes it from that experiment's results).
"""

from __future__ import annotations

from pathlib import Path

from arithrepro.findings.base import UNTESTED, outcome

LEDGER = Path("claims")
KINDS = ("number", "comparison", "trend", "threshold", "qualitative", "question", "setting")
TARGETS = ("modular-source",)   # named targets that test claims outside a profile's own runs


class LedgerError(ValueError):
    """A ledger file that does not follow the schema: one line naming the file and the key."""


def path(task: str) -> Path:
    return LEDGER / f"{task}.yaml"


def load(task: str, root: Path = Path(".")) -> dict:
    """claims/<task>.yaml, checked (LedgerError)."""
    import yaml

    p = root / path(task)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as err:
        raise LedgerError(f"{p}: cannot read it ({err.strerror})") from err
    except yaml.YAMLError as err:
        raise LedgerError(f"{p}: not YAML ({str(err).splitlines()[0]})") from err
    check(data, str(p), task)
    return data


def check(data, where: str, task: str, finding_ids: set[str] | None = None) -> None:
    """The ledger's schema (LedgerError naming the file and the entry's key)."""
    if not isinstance(data, dict) or not isinstance(data.get("source"), dict) \
            or not isinstance(data.get("claims"), list):
        raise LedgerError(f"{where}: expected `source` (a mapping) and `claims` (a list)")
    for key in ("file", "task", "title", "carries"):
        if not isinstance(data["source"].get(key), str):
            raise LedgerError(f"{where}: source.{key}: expected a string")
    if data["source"]["task"] != task:
        raise LedgerError(f"{where}: source.task = {data['source']['task']!r}: expected {task!r}")
    if finding_ids is None:
        from arithrepro.findings.registry import FINDINGS

        finding_ids = {f.id for f in FINDINGS.get(task, ())}
    seen = set()
    for i, c in enumerate(data["claims"]):
        cid = c.get("id") if isinstance(c, dict) else None
        at = f"{where}: claims[{i}]" + (f" ({cid})" if cid else "")
        if not isinstance(c, dict) or not isinstance(cid, str) or not cid.startswith(f"{task}."):
            raise LedgerError(f"{at}: id: expected a string starting with '{task}.'")
        if cid in seen:
            raise LedgerError(f"{at}: id: repeated")
        seen.add(cid)
        for key in ("where", "claim", "setting"):
            if not isinstance(c.get(key), str) or not c[key].strip():
                raise LedgerError(f"{at}: {key}: expected a non-empty string")
        if c.get("kind") not in KINDS:
            raise LedgerError(f"{at}: kind = {c.get('kind')!r}: expected one of {', '.join(KINDS)}")
        ways = [k for k in ("test", "untested") if k in c] + (["here"] if c["kind"] == "setting" else [])
        if len(ways) != 1:
            raise LedgerError(f"{at}: expected exactly one of test, untested, or kind setting "
                              f"with here; found {', '.join(ways) or 'none'}")
        if "here" in c and not isinstance(c["here"], str):
            raise LedgerError(f"{at}: here: expected a string")
        if "untested" in c and not isinstance((c["untested"] or {}).get("why"), str):
            raise LedgerError(f"{at}: untested.why: expected a string")
        if "test" in c:
            _check_test(c["test"], c, at, finding_ids)


def _check_test(t, c: dict, at: str, finding_ids: set[str]) -> None:
    from arithrepro.config import profiles

    if not isinstance(t, dict):
        raise LedgerError(f"{at}: test: expected a mapping")
    known = set(profiles()) | set(TARGETS)
    ps = t.get("profiles")
    if not isinstance(ps, list) or not ps or any(p not in known for p in ps):
        raise LedgerError(f"{at}: test.profiles = {ps!r}: expected a list of {', '.join(sorted(known))}")
    if not isinstance(t.get("differs", ""), str):
        raise LedgerError(f"{at}: test.differs: expected a string")
    if ("finding" in t) == ("metric" in t):
        raise LedgerError(f"{at}: test: expected exactly one of finding, metric")
    if "finding" in t:
        if t["finding"] not in finding_ids:
            raise LedgerError(f"{at}: test.finding = {t['finding']!r}: no such finding "
                              f"(known: {', '.join(sorted(finding_ids))})")
        return
    if not isinstance(t.get("cell"), dict) or not t["cell"]:
        raise LedgerError(f"{at}: test.cell: expected a mapping of record fields to values")
    if not _number(_value(c)):
        raise LedgerError(f"{at}: test.value: expected a number (or reported.value a number)")
    if not _number(t.get("tolerance")) or t["tolerance"] < 0:
        raise LedgerError(f"{at}: test.tolerance: expected a number >= 0")
    if not isinstance(t.get("tolerance_why"), str):
        raise LedgerError(f"{at}: test.tolerance_why: expected a string")


def _value(c: dict):
    """The source's value a metric test checks ours against: test.value, else reported.value."""
    return c["test"].get("value", (c.get("reported") or {}).get("value"))


def _num(v) -> str:
    """A number as the source printed it: counts with thousands separators, others as given."""
    if not _number(v):
        return str(v)
    if float(v).is_integer() and abs(v) >= 1000:
        return f"{int(v):,}"
    return f"{v:g}" if isinstance(v, float) and abs(v) >= 1e-4 else str(v)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --- verdicts ----------------------------------------------------------------------------------

def verdicts(ledger: dict, rows, findings: list[dict], profile: str,
             elsewhere: dict | None = None, targets: tuple = ()) -> list[dict]:
    """Each claim of `ledger` judged on this profile's `rows` (the task's records) and the
    task's `findings` (findings.verdicts): [{id, outcome (None for a setting), ours, n, why}].
    `targets`: the named targets these runs are (params claims.targets); `elsewhere`: {claim
    id: verdict} from a named target's run (docs/modular-source.json)."""
    by_id = {f["id"]: f for f in findings}
    out = []
    for c in ledger["claims"]:
        v = {"id": c["id"], "outcome": None, "ours": "", "n": 0, "why": ""}
        if c["kind"] == "setting":
            v["why"] = c["here"]
        elif "untested" in c:
            v.update(outcome=UNTESTED, why=_untested_words(c["untested"]))
        else:
            v.update(_tested(c, rows, by_id, {profile, *targets}, elsewhere or {}))
        out.append(v)
    return out


def _untested_words(u: dict) -> str:
    return u["why"] + (f" Would take: {u['cost']}" if u.get("cost") else "")


def _tested(c: dict, rows, by_id: dict, active: set, elsewhere: dict) -> dict:
    t = c["test"]
    if not active & set(t["profiles"]):
        for target in TARGETS:
            if target in t["profiles"] and c["id"] in elsewhere:
                return {**elsewhere[c["id"]], "via": target}
        where = " or ".join(f"`make {p}`" if p in TARGETS else f"the {p} profile"
                            for p in t["profiles"])
        profile = next(p for p in sorted(active) if p not in TARGETS)
        return {"outcome": UNTESTED, "why": f"not in the {profile} profile: {where} tests it"}
    if "finding" in t:
        f = by_id.get(t["finding"])
        if f is None:
            return {"outcome": UNTESTED, "why": f"finding {t['finding']} not checked"}
        return {"outcome": f["outcome"], "ours": f["measured"], "n": f["n"],
                "why": f"finding {t['finding']}: {f['test']}"}
    return _against(c, t, rows)


def _against(c: dict, t: dict, rows) -> dict:
    from arithrepro import stats
    from arithrepro.findings.base import values

    value = _value(c)
    try:
        xs = values(rows, t["metric"], **t["cell"]) if len(rows) else []
        trials = values(rows, t["trials"], **t["cell"]) if t.get("trials") and xs else []
    except KeyError as err:
        return {"outcome": UNTESTED, "why": f"the records have no {err.args[0]}"}
    cell = ", ".join(f"{k} {v}" for k, v in t["cell"].items())
    if not xs:
        return {"outcome": UNTESTED, "why": f"no runs of {cell}"}
    a = stats.against(xs, float(value), float(t["tolerance"]),
                      trials=int(min(trials)) if trials else None)
    return {"outcome": outcome(a.outcome), "ours": f"{t['metric']}, {cell}: {a.words()}",
            "n": a.n, "why": f"within ± {t['tolerance']:g} of {value:g} ({t['tolerance_why']})"}


def counts(judged: list[dict]) -> dict:
    """{outcome: how many claims}, settings apart."""
    from arithrepro.findings.base import OUTCOMES

    out = {o: 0 for o in OUTCOMES}
    for v in judged:
        if v["outcome"] is not None:
            out[v["outcome"]] += 1
    out["settings"] = sum(v["outcome"] is None for v in judged)
    return out


def reported_words(r: dict | None) -> str:
    """The source's number as the page shows it: '0.9979 ± 0.0021 fraction (mean over seeds 0
    and 42)', a mapping of named numbers, or '–'."""
    if not r:
        return "–"
    value = r.get("value")
    if isinstance(value, dict):
        shown = ", ".join(f"{k} {_num(v)}" for k, v in value.items())
    else:
        shown = _num(value)
    if _number(r.get("spread")):
        shown += f" ± {_num(r['spread'])}"
    unit = f" {r['unit']}" if r.get("unit") else ""
    statistic = f" ({r['statistic']})" if r.get("statistic") else ""
    return f"{shown}{unit}{statistic}"


def ledger_rows(ledger: dict, judged: list[dict]) -> dict:
    """{source, claims: [...]} for docs/results.json: each claim's place, words, the source's
    number, how it is tested, and its verdict here."""
    by_id = {v["id"]: v for v in judged}
    rows = []
    for c in ledger["claims"]:
        v = by_id[c["id"]]
        rows.append({"id": c["id"], "where": c["where"], "claim": c["claim"], "kind": c["kind"],
                     "source": reported_words(c.get("reported")), "setting": c["setting"],
                     "profiles": (c.get("test") or {}).get("profiles", []),
                     "differs": (c.get("test") or {}).get("differs", ""),
                     **{k: v.get(k) for k in ("outcome", "ours", "n", "why", "via")}})
    return {"source": dict(ledger["source"]), "claims": rows}


def elsewhere(path: Path = Path("docs/modular-source.json")) -> dict:
    """{claim id: verdict} that a named target's run recorded (docs/modular-source.json; {}
    before it ran). ArtifactError when the file is damaged."""
    from arithrepro.io import read_json

    if not path.is_file():
        return {}
    data = read_json(path, ("claims",))
    return {c["id"]: {k: c.get(k) for k in ("outcome", "ours", "n", "why")}
            for c in data["claims"] if c.get("outcome") not in (None, UNTESTED)}
