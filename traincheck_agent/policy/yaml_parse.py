"""Policy YAML parsing with PyYAML's safe loader: data only, no anchors or aliases, no
duplicate keys. Waivers files (``check.waivers``) are parsed the same way.

Kept apart from the loader so that PyYAML (about 10 ms of start-up) is imported only when a
policy file has to be parsed, not when its parsed form is in the cache (``parse_cache``).
"""

from __future__ import annotations

from typing import Any

import yaml


class _PolicyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when PyYAML was built with it (several times faster at startup); the
    safe constructor either way: policies are data, never Python objects. Each node is built
    once: a second visit is an alias, refused. A mapping that lost entries had duplicate keys."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if node in self.constructed_objects or node in self.recursive_objects:
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases (&name, *name) are not allowed",
                node.start_mark)
        return super().construct_object(node, deep=deep)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        if len(mapping) < len(node.value):
            seen: set[str] = set()
            for key_node, _ in node.value:
                key = str(getattr(key_node, "value", ""))
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return mapping


def parse_policy_text(text: str) -> Any:
    """The document in ``text``. Raises ValueError with the problem (one line) when it is not
    valid YAML for a policy; UnicodeDecodeError passes through."""
    try:
        return yaml.load(text, Loader=_PolicyLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {exc}".replace("\n", " ")) from None
    except RecursionError:
        raise ValueError("not valid YAML: nested too deeply") from None
