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
