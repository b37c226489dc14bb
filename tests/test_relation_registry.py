"""Each relation module is the one home of its relation's facts, as ``relations.Relation`` says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from traincheck_agent.inference import relations
from traincheck_agent.inference.relations import TRIAGE_KINDS, Relation

REQUIRED = [name for name in Relation.__annotations__] + ["key_of", "invariant_key", "infer", "violates",
                                                          "violation"]


def test_every_relation_module_declares_its_facts():
    prefixes = set()
    for name in relations.MODULES:
        module = relations.module(name)
        missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
        assert not missing, (name, missing)
        assert name == module.RELATION
        assert module.TRIAGE_KIND in TRIAGE_KINDS[:-1]
        assert module.SUBJECT_FIELDS and all(isinstance(f, str) for f in module.SUBJECT_FIELDS)
        prefixes.add(module.ID_PREFIX)
    assert len(prefixes) == len(relations.MODULES)  # ids tell the relations apart
    assert relations.module("NoSuchRelation") is None


@pytest.mark.slow
def test_state_is_read_a_snapshot_point_at_a_time_so_no_snapshot_is_expanded():
    """Every relation that reads state takes a snapshot record as it is: neither inference nor
    the online checker builds one record per variable of a point (``stream.views``)."""
    from traincheck_agent.check.online import OnlineChecker
    from traincheck_agent.inference.invariant import Invariant
    from traincheck_agent.inference.stream import SnapshotCollector
    from traincheck_agent.trace.schema import KIND_SNAPSHOT, KIND_STATE

    readers = [relations.module(name) for name in relations.MODULES]
    readers = [module for module in readers if KIND_SNAPSHOT in module.READS or KIND_STATE in module.READS]
    assert len(readers) >= 6
    for module in readers:
        assert KIND_STATE not in module.READS, module.RELATION
        assert issubclass(module.Collector, SnapshotCollector), module.RELATION
    every = [Invariant(module.RELATION, dict.fromkeys(module.SUBJECT_FIELDS, "x"), ()) for module in readers]
    checker = OnlineChecker(every, lambda v: None)
    checker.feed({"kind": "header", "run_id": "r", "rank": 0, "world_size": 2})
    assert checker._reads == (True, False)


def test_only_the_relations_asked_for_are_imported():
    code = ("import sys\nfrom traincheck_agent.inference import relations\n"
            "relations.module('GradApplied')\n"
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith(relations.__name__ + '.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['grad_applied']"


def test_the_registry_functions_survive_every_module_being_imported():
    relations.load()  # imports every relation module, cross_rank among them
    assert relations.compares_ranks("CrossRankConsistent") and relations.compares_ranks("CrossRankValue")
    assert not relations.compares_ranks("StateTransition") and not relations.compares_ranks("NoSuchRelation")
    assert callable(relations.module) and callable(relations.load)
