"""The claims ledger: every claim and every reported number of the five sources, as data
(claims/<task>.yaml), and each claim's verdict on the run sets that test it.

A ledger entry says where the claim stands in its source, the claim in our words, its kind, the
number with its spread where the source gives one, and the settings it was measured at; then one
of:
- `kind: setting` and `here`: a fact of the source's setup (a value, an equation, a format),
  followed or departed from as `here` says; no verdict;
- `test`: what tests it, on which run sets (`profiles`: profiles and named targets): a finding
  of the task (`finding`, its id), or the source's number against our seeds (`metric` of the runs
  `cell` selects, within ± `tolerance` or inside a stated `band`, each with its derivation,
  arithrepro/stats.against); `stand_in` names, per run set that does not run the source's
  setting, how it differs in one sentence (`differs` gives the detail); `consistency` marks a
  check that holds by construction or that any working run passes, which counts as no
  reproduction;
- `untested`: why no run set tests it (`why`), its `reason` (REASONS) and what testing it would
  take (`cost`).

A claim's verdict comes from every run set that tests it and ran: the page's own profile (its
records), and named targets whose verdicts a committed file carries (arithrepro/runsets.py).
Each judgement names its run set's commit, machine and seeds; where several run sets judge one
claim, the row shows each and one decides (DECIDES). The source's own seeds that chose a recipe
(`source.watched`) never decide; they are reported beside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from arithrepro.findings.base import DIFFERS, UNTESTED

LEDGER = Path("claims")
KINDS = ("number", "comparison", "trend", "threshold", "qualitative", "question", "setting")
TARGETS = ("modular-source",)   # named targets that test claims outside a profile's own runs
# why a claim is not tested here; the first three need a `cost`
REASONS = {"paper": "needs the paper profile", "data": "needs data this machine cannot reach",
           "unimplemented": "not implemented", "unmeasurable": "not measurable",
           "not-run": "its run set has not run"}
SOURCE, STAND_IN, CONSISTENCY = "at the source's setting", "on a stand-in", "consistency check"
STAND_IN_MAX = 160   # characters: one short sentence


class LedgerError(ValueError):
    """A ledger file that does not follow the schema: one line naming the file and the key."""


def watched_seeds(source: dict) -> set[int]:
    """The seeds a ledger's source block names as watched while a recipe was chosen."""
    return set((source.get("watched") or {}).get("seeds", []))


def path(task: str) -> Path:
    return LEDGER / f"{task}.yaml"


def load(task: str, root: Path = Path(".")) -> dict:
    """claims/<task>.yaml, checked (LedgerError)."""
    import yaml

    import re

    p = root / path(task)
    try:
        text = p.read_text()
        # LibYAML's parser where PyYAML has it: the ledgers are 360 kB, 0.8 s of CPU with the
        # pure-Python one, which the results stage and every test of the ledger pay
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as err:
        raise LedgerError(f"{p}: cannot read it ({err.strerror})") from err
    except yaml.YAMLError as err:
        raise LedgerError(f"{p}: not YAML ({str(err).splitlines()[0]})") from err
    check(data, str(p), task)
    # where each claim starts in the file, so that a page can link its entry
    starts = {m.group(1): text.count("\n", 0, m.start()) + 1
              for m in re.finditer(r'^ *- id: "?([^"\n]+?)"?\s*$', text, flags=re.M)}
    for c in data["claims"]:
        c["line"] = starts.get(c["id"])
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
    _check_watched(data["source"].get("watched"), where)
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
        if "untested" in c:
            _check_untested(c["untested"], at)
        if "test" in c:
            _check_test(c["test"], c, at, finding_ids)


def _check_watched(w, where: str) -> None:
    if w is None:
        return
    if not isinstance(w, dict) or not isinstance(w.get("seeds"), list) \
            or not all(isinstance(x, int) for x in w["seeds"]) or not isinstance(w.get("why"), str):
        raise LedgerError(f"{where}: source.watched: expected {{seeds: [integers], why: a string}}")


def _check_untested(u, at: str) -> None:
    if not isinstance(u, dict) or not isinstance(u.get("why"), str):
        raise LedgerError(f"{at}: untested.why: expected a string")
    chosen = [r for r in REASONS if r != "not-run"]
    if u.get("reason") not in chosen:
        raise LedgerError(f"{at}: untested.reason = {u.get('reason')!r}: expected one of "
                          f"{', '.join(chosen)}")
    if u["reason"] in ("paper", "data", "unimplemented") and not isinstance(u.get("cost"), str):
        raise LedgerError(f"{at}: untested.cost: expected a string (what testing it would take)")


def _check_test(t, c: dict, at: str, finding_ids: set[str]) -> None:
    from arithrepro import stats
    from arithrepro.config import profiles

    if not isinstance(t, dict):
        raise LedgerError(f"{at}: test: expected a mapping")
    known = set(profiles()) | set(TARGETS)
    ps = t.get("profiles")
    if not isinstance(ps, list) or not ps or any(p not in known for p in ps):
        raise LedgerError(f"{at}: test.profiles = {ps!r}: expected a list of {', '.join(sorted(known))}")
    if not isinstance(t.get("differs", ""), str):
        raise LedgerError(f"{at}: test.differs: expected a string")
    stand_in = t.get("stand_in", {})
    if not isinstance(stand_in, dict) or any(
            k not in ps or not isinstance(v, str) or not v.strip() or len(v) > STAND_IN_MAX
            for k, v in stand_in.items()):
        raise LedgerError(f"{at}: test.stand_in: expected a mapping of its profiles to one "
                          f"sentence each (at most {STAND_IN_MAX} characters)")
    if not isinstance(t.get("consistency", ""), str):
        raise LedgerError(f"{at}: test.consistency: expected a string (why it holds by construction)")
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
    if t.get("scale", "real") not in stats.SCALES:
        raise LedgerError(f"{at}: test.scale = {t['scale']!r}: expected one of {', '.join(stats.SCALES)}")
    if "band" in t:
        b = t["band"]
        if not (isinstance(b, list) and len(b) == 2 and all(map(_number, b)) and b[0] <= b[1]):
            raise LedgerError(f"{at}: test.band: expected [low, high], two numbers in order")
        if not isinstance(t.get("band_why"), str) or "tolerance" in t:
            raise LedgerError(f"{at}: test.band_why: expected a string (and no tolerance beside a band)")
        return
    if not _number(t.get("tolerance")) or t["tolerance"] < 0:
        raise LedgerError(f"{at}: test.tolerance: expected a number >= 0 (or a band)")
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


def scale_of(metric: str) -> str:
    """The range a record metric lives in (stats.SCALES), by its name: accuracies are proportions,
    losses, bits per character, step counts and times are positive; differences of steps
    (dt_*) and anything else are real."""
    import re

    if metric.startswith("dt_"):
        return "real"
    if re.search(r"_steps?$", metric):
        return "positive"
    if re.search(r"(^|_)acc($|_)", metric):
        return "proportion"
    if re.search(r"loss|bpc|seconds|^params$|norm", metric):
        return "positive"
    return "real"


# --- run sets ----------------------------------------------------------------------------------

@dataclass
class RunSet:
    """Runs that judge claims: a profile's records (`rows`, with the task's `findings` on them),
    or a named target's verdicts carried in a committed file (`carried`: {claim id: verdict}).
    `where`: its provenance in words (commit, tree, machine, threads, seeds); `other_code`: empty,
    or what says its code is not the page's (its commit, and the files of its stages that
    differ)."""
    name: str
    rows: object = None
    findings: list = field(default_factory=list)
    carried: dict = field(default_factory=dict)
    where: str = ""
    other_code: str = ""
    watched: bool = False   # the source's seeds that chose a recipe: reported, never deciding
    setting: str = ""       # another CPU capability or thread count of the same runs (crosscheck)

    @property
    def ran(self) -> bool:
        return self.rows is not None or bool(self.carried)


# --- verdicts ----------------------------------------------------------------------------------

def verdicts(ledger: dict, sets: list[RunSet], estimate: dict | None = None) -> list[dict]:
    """Each claim of `ledger` judged on every run set in `sets` that tests it: [{id, outcome (None
    for a setting), class, reason, ours, n, why, via, judged: [one per run set]}], the deciding
    run set's judgement on top (`decide`). `estimate`: {device, tasks: {task: GPU seconds}} of
    the paper profile, measured (docs/runsets/estimate-paper.json), for the cost of claims only it tests."""
    task = ledger["source"]["task"]
    out = []
    for c in ledger["claims"]:
        v = {"id": c["id"], "outcome": None, "class": None, "reason": None, "ours": "", "n": 0,
             "why": "", "via": None, "judged": []}
        if c["kind"] == "setting":
            v["why"] = c["here"]
        elif "untested" in c:
            u = c["untested"]
            v.update(outcome=UNTESTED, reason=u["reason"], why=_untested_words(u))
        else:
            judged = [_judge(c, s) for s in sets if s.name in c["test"]["profiles"] and s.ran]
            judged = [j for j in judged if j is not None]
            v["judged"] = judged
            deciding = [j for j in judged if not j["watched"]]
            got = decide(deciding) if deciding else None
            if got is None or got["outcome"] == UNTESTED and got["why"].startswith("no runs"):
                got = {**(got or {}), **_not_run(c, sets, task, estimate,
                                                 watched=len(deciding) < len(judged))}
            v.update(got)
        out.append(v)
    return out


def _untested_words(u: dict) -> str:
    return u["why"] + (f" Would take: {u['cost']}" if u.get("cost") else "")


def _not_run(c: dict, sets: list[RunSet], task: str, estimate: dict | None,
             watched: bool = False) -> dict:
    """A tested claim that no run set here judged (or only seeds that were `watched`): the run
    sets that would, and their cost."""
    ps = c["test"]["profiles"]
    ran = ", ".join(dict.fromkeys(s.name for s in sets if s.ran and not s.watched)) or "none"
    if watched:
        ran += "; only seeds watched while a recipe was chosen judged it, shown beside"
    if ps == ["paper"]:
        gpu = (estimate or {}).get("tasks", {}).get(task)
        cost = (f"the paper profile's {task} runs, {gpu / 3600:.1f} GPU-hours on {estimate['device']} "
                f"by the measured estimate (docs/runsets/estimate-paper.json)" if gpu else
                f"the paper profile's {task} runs (GPU time not yet measured: `arithrepro estimate "
                f"--profile paper --json docs/runsets/estimate-paper.json` on a GPU)")
        return {"outcome": UNTESTED, "reason": "paper",
                "why": f"only the paper profile tests it (run here: {ran}). Would take: {cost}"}
    where = " or ".join(f"`make {p}`" if p in TARGETS else f"the {p} profile" for p in ps)
    return {"outcome": UNTESTED, "reason": "not-run",
            "why": f"{where} tests it, and {'it has not' if len(ps) == 1 else 'none has'} run "
                   f"here (run here: {ran})"}


def _judge(c: dict, s: RunSet) -> dict | None:
    """The claim's judgement on one run set: {set, outcome, class, stand_in, ours, n, why, where,
    other_code}; None where the set carries no verdict for it."""
    t = c["test"]
    if s.rows is not None:
        got = _from_finding(t, s) if "finding" in t else _against(c, t, s.rows)
    elif c["id"] in s.carried:
        got = dict(s.carried[c["id"]])
    else:
        return None
    stand_in = t.get("stand_in", {}).get(s.name, "")
    kind = CONSISTENCY if t.get("consistency") else STAND_IN if stand_in else SOURCE
    return {"set": s.name, "outcome": got["outcome"], "class": kind, "stand_in": stand_in,
            "consistency": t.get("consistency", ""), "ours": got.get("ours", ""),
            "n": got.get("n", 0), "why": got.get("why", ""), "where": s.where,
            "other_code": s.other_code, "watched": s.watched, "setting": s.setting}


def _from_finding(t: dict, s: RunSet) -> dict:
    f = next((f for f in s.findings if f["id"] == t["finding"]), None)
    if f is None:
        return {"outcome": UNTESTED, "why": f"finding {t['finding']} not checked"}
    return {"outcome": f["outcome"], "ours": f["measured"], "n": f["n"],
            "why": f"finding {t['finding']}"}


def decide(judged: list[dict]) -> dict:
    """The judgement that decides a claim tested on several run sets: one that measured something
    before one that did not; at the source's setting before a stand-in; the page's own code
    before other code; more seeds; then the order given (the page's own profile first). Where
    the same runs on another CPU or thread count (`setting`), of the same code, reach another
    verdict, the claim's verdict is DIFFERS, naming each."""
    rank = {SOURCE: 0, CONSISTENCY: 0, STAND_IN: 1}
    best = min(judged, key=lambda j: (j["outcome"] == UNTESTED, rank[j["class"]],
                                      bool(j["other_code"]), bool(j.get("setting")), -j["n"]))
    peers = [j for j in judged if j["set"] == best["set"] and not j["other_code"]
             and j["outcome"] != UNTESTED]
    if len({j["outcome"] for j in peers}) > 1:
        said = "; ".join(f"{j.get('setting') or 'this page'}: {j['outcome']}" for j in peers)
        return {"outcome": DIFFERS, "class": best["class"], "reason": None, "ours": best["ours"],
                "n": best["n"], "why": f"{said} ({best['why']})", "via": best["set"]}
    untested = best["outcome"] == UNTESTED   # it ran, and the records could not say
    return {"outcome": best["outcome"], "class": None if untested else best["class"],
            "reason": "unimplemented" if untested else None, "ours": best["ours"],
            "n": best["n"], "why": best["why"], "via": best["set"]}


def _against(c: dict, t: dict, rows) -> dict:
    from arithrepro import stats
    from arithrepro.findings.base import Part, each, values

    value = _value(c)
    try:
        xs = values(rows, t["metric"], **t["cell"]) if len(rows) else []
        trials = values(rows, t["trials"], **t["cell"]) if t.get("trials") and xs else []
    except KeyError as err:
        return {"outcome": UNTESTED, "why": f"the records have no {err.args[0]}"}
    cell = ", ".join(f"{k} {v}" for k, v in t["cell"].items())
    if not xs:
        return {"outcome": UNTESTED, "why": f"no runs of {cell}"}
    band = tuple(t["band"]) if "band" in t else None
    a = stats.against(xs, float(value), float(t.get("tolerance", 0)),
                      trials=int(min(trials)) if trials else None,
                      scale=t.get("scale", scale_of(t["metric"])), band=band)
    rule = (f"inside [{_num(band[0])}, {_num(band[1])}] ({t['band_why']})" if band else
            f"within ± {t['tolerance']:g} of {value:g} ({t['tolerance_why']})")
    v = each([Part(f"{t['metric']}, {cell}", a, a.n, 1, "")], "")
    return {"outcome": v.outcome, "ours": v.measured, "n": v.n, "why": rule}


def counts(judged: list[dict]) -> dict:
    """The claims by verdict and class: {outcome: {class or reason: how many}}, consistency
    checks apart ({outcome: n}), settings apart (a number)."""
    from arithrepro.findings.base import OUTCOMES

    out: dict = {o: {} for o in OUTCOMES}
    out["consistency"], out["settings"] = {}, 0
    for v in judged:
        if v["outcome"] is None:
            out["settings"] += 1
        elif v["outcome"] == UNTESTED:
            out[UNTESTED][v["reason"]] = out[UNTESTED].get(v["reason"], 0) + 1
        elif v["class"] == CONSISTENCY:
            out["consistency"][v["outcome"]] = out["consistency"].get(v["outcome"], 0) + 1
        else:
            out[v["outcome"]][v["class"]] = out[v["outcome"]].get(v["class"], 0) + 1
    return out


def total(c: dict, key: str) -> int:
    """How many claims one entry of `counts` holds."""
    v = c.get(key, 0)
    return sum(v.values()) if isinstance(v, dict) else int(v)


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
    number, how it is tested, and its verdict here with every run set's judgement."""
    by_id = {v["id"]: v for v in judged}
    rows = []
    for c in ledger["claims"]:
        v = by_id[c["id"]]
        rows.append({"id": c["id"], "line": c.get("line"), "where": c["where"],
                     "claim": c["claim"], "kind": c["kind"],
                     "source": reported_words(c.get("reported")), "setting": c["setting"],
                     "profiles": (c.get("test") or {}).get("profiles", []),
                     "differs": (c.get("test") or {}).get("differs", ""),
                     **{k: v.get(k) for k in ("outcome", "class", "reason", "ours", "n", "why",
                                              "via", "judged")}})
    return {"source": dict(ledger["source"]), "claims": rows}
