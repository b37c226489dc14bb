"""What a violation says to a person, in one sentence: what happened, and where.

A relation's message starts with the invariant's description, precondition included ("backward
finds the grad None or zero when it starts, for every variable it touches, when first_in_step =
True: violated by model.fc.weight ..."). That is the right record for a log, but not what a
person should read first. Here the record is turned round: what happened (in plain words from
``hints.HINTS`` where the case is known, else the relation's own words) and where, then what was
expected, without the precondition (the record and the report keep it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traincheck_agent.report.hints import hint_for_record
from traincheck_agent.report.name_patterns import common_scope


def expected_of(record: Mapping[str, Any]) -> str:
    """What the invariant says, precondition included, as the record carries it."""
    evidence = record.get("evidence")
    if isinstance(evidence, Mapping) and evidence.get("expected"):
        return str(evidence["expected"])
    attributes = record.get("attributes")
    if isinstance(attributes, Mapping) and attributes.get("traincheck.expected"):
        return str(attributes["traincheck.expected"])
    return ""


def what_happened(record: Mapping[str, Any]) -> str:
    """The message without the invariant's description that the relations put in front."""
    message = str(record.get("message", ""))
    expected = expected_of(record)
    if expected and message.startswith(expected):
        rest = message[len(expected):].lstrip(":").strip()
        if rest:
            return rest
    return message


def precondition_of(record: Mapping[str, Any]) -> list[str]:
    """The precondition's clauses in words (from the evidence), [] when there is none."""
    evidence = record.get("evidence")
    clauses = evidence.get("precondition") if isinstance(evidence, Mapping) else None
    return [str(c) for c in clauses] if isinstance(clauses, list) else []


def without_condition(expected: str, clauses: list[str]) -> str:
    """``expected`` without the ``, when <clauses>`` that ``with_condition`` appends."""
    suffix = ", when " + " and ".join(clauses) if clauses else ""
    return expected[: -len(suffix)] if suffix and expected.endswith(suffix) else expected


def plain_expected(record: Mapping[str, Any]) -> str:
    """What the invariant says, without its precondition."""
    return without_condition(expected_of(record), precondition_of(record))


def where_of(record: Mapping[str, Any]) -> str:
    """``on model.fc.weight``, ``(torch.optim.SGD.step)`` or ``on model.fc.weight on ranks [0, 1]``."""
    parts = []
    if record.get("variable"):
        parts.append(f"on {record['variable']}")
    elif record.get("api"):
        parts.append(f"({record['api']})")
    ranks = record.get("ranks")
    if isinstance(ranks, list) and ranks:
        parts.append(f"on ranks {ranks}")
    return " ".join(parts)


def record_sentence(record: Mapping[str, Any]) -> str:
    """What happened, and on what: ``backward found grads left over from an earlier step on
    model.fc.weight``; a case without a hint keeps the relation's own words."""
    hint = hint_for_record(record)
    where = where_of(record)
    if hint is None:
        happened = what_happened(record)
        named = str(record.get("variable") or record.get("api") or "")
        if named and named not in happened:
            happened += f" ({named})"
        ranks = record.get("ranks")
        if isinstance(ranks, list) and ranks and "rank" not in happened:
            happened += f" on ranks {ranks}"
        return happened
    return f"{hint.happened} {where}" if where else hint.happened


def _ranks(ranks: list[int]) -> str:
    return f"on ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else ""


def group_sentence(happened: str, variables: list[str], noun: str, first_step: int | None,
                   last_step: int | None, ranks: list[int], at_first: tuple[int, int] | None = None) -> str:
    """One sentence for a group: ``backward found grads left over from an earlier step on 10 of
    10 parameters of `model` at step 1, again up to step 4``. ``at_first``: (variables broken,
    variables judged) at the first step, when the judged count is known; otherwise the sentence
    counts the group's variables and says no "of". One variable keeps its exact name."""
    names = sorted(set(variables))
    parts = [happened]
    if len(names) == 1:
        parts.append(f"on `{names[0]}`")
    elif names:
        count = f"{at_first[0]} of {at_first[1]}" if at_first is not None else str(len(names))
        scope = common_scope(names)
        parts.append(f"on {count} {noun}" + (f" of `{scope}`" if scope else ""))
    if first_step is not None:
        if first_step == last_step or last_step is None:
            parts.append(f"at step {first_step}")
        elif at_first is not None and len(names) > 1:
            parts.append(f"at step {first_step}, again up to step {last_step}")
        else:
            parts.append(f"at steps {first_step}-{last_step}")
    parts.append(_ranks(ranks))
    return " ".join(p for p in parts if p)


def plural_noun(count: int, noun: str) -> str:
    """``group`` for 1, ``groups`` otherwise (0 included)."""
    return noun if count == 1 else noun + "s"


def plural(count: int, noun: str) -> str:
    """``1 group``, ``2 groups``, ``0 groups``."""
    return f"{count} {plural_noun(count, noun)}"


__all__ = ["expected_of", "group_sentence", "plural", "plural_noun", "plain_expected", "precondition_of", "record_sentence", "what_happened",
           "where_of", "without_condition"]
