"""The built-in kernels' definitions against ONNX's schema history: every ONNX version a
definition serves has the attributes the definition declares for that version, and no more."""
import collections

import onnx
import pytest

# Attributes a native kernel leaves to another kernel: a node that gives one is refused by the
# native definition and bound to the Python or reference kernel that reads it.
SERVED_ELSEWHERE = {
    ("", "TfIdfVectorizer", "pool_strings"): "string pools run on the Python kernel",
    ("ai.onnx.ml", "LinearClassifier", "classlabels_strings"): "string labels run on the Python kernel",
    ("ai.onnx.ml", "SVMClassifier", "classlabels_strings"): "string labels run on the Python kernel",
    ("ai.onnx.ml", "TreeEnsembleClassifier", "classlabels_strings"): "string labels run on the Python kernel",
    ("ai.onnx.preview", "FlexAttention", "prob_mod"): "graph attributes run on the reference kernel",
    ("ai.onnx.preview", "FlexAttention", "score_mod"): "graph attributes run on the reference kernel",
}


def onnx_history():
    history = collections.defaultdict(list)
    for s in onnx.defs.get_all_schemas_with_history():
        history[(s.domain, s.name)].append(s)
    return {k: sorted(v, key=lambda s: s.since_version) for k, v in history.items()}


def served_versions(handle, history):
    """The ONNX schemas in force over the handle's range: the one at its since, and each later one."""
    until = handle.until_version or 10**9
    return ([s for s in history if s.since_version <= handle.since_version][-1:]
            + [s for s in history if handle.since_version < s.since_version <= until])


def declared_at(attr, version):
    return attr["since_version"] <= version and (attr["until_version"] == 0 or version <= attr["until_version"])


def attribute_disagreements(table):
    history = onnx_history()
    found = []
    for handle in table:
        domain = "" if handle.domain in ("", "ai.onnx") else handle.domain
        if (domain, handle.name) not in history:
            continue
        attrs = {a["name"]: a for a in handle.schema()["attributes"]}
        for schema in served_versions(handle, history[(domain, handle.name)]):
            version = max(schema.since_version, handle.since_version)
            for name in schema.attributes:
                if name not in attrs and (domain, handle.name, name) not in SERVED_ELSEWHERE:
                    found.append(f"{handle.name}-{handle.since_version}: ONNX {schema.since_version} has "
                                 f"'{name}', the definition does not")
            for name, attr in attrs.items():
                if name not in schema.attributes and declared_at(attr, version):
                    found.append(f"{handle.name}-{handle.since_version}: declares '{name}' at opset {version}, "
                                 f"which ONNX {schema.since_version} does not have")
    return found


def test_each_definition_has_the_attributes_of_every_version_it_serves(kernels):
    assert attribute_disagreements(kernels.op_table) == []


def test_the_audit_sees_a_missing_and_an_extra_attribute(kernels):
    """The audit can fail: a definition that drops an attribute, or declares one too early, is named."""
    class Edited:
        def __init__(self, handle, edit):
            self.handle, self.edit = handle, edit
            self.name, self.domain = handle.name, handle.domain
            self.since_version, self.until_version = handle.since_version, handle.until_version

        def schema(self):
            schema = dict(self.handle.schema())
            schema["attributes"] = self.edit([dict(a) for a in schema["attributes"]])
            return schema

    reshape = next(h for h in kernels.op_table if h.name == "Reshape" and h.domain in ("", "ai.onnx"))
    dropped = Edited(reshape, lambda attrs: [a for a in attrs if a["name"] != "allowzero"])
    early = Edited(reshape, lambda attrs: [dict(a, since_version=0) for a in attrs])
    assert attribute_disagreements([dropped])[0] == "Reshape-5: ONNX 14 has 'allowzero', the definition does not"
    assert attribute_disagreements([early]) == [
        "Reshape-5: declares 'allowzero' at opset 5, which ONNX 5 does not have",
        "Reshape-5: declares 'allowzero' at opset 13, which ONNX 13 does not have"]


@pytest.mark.parametrize("domain, op, attribute", sorted(SERVED_ELSEWHERE))
def test_no_entry_left_to_other_kernels_is_stale(kernels, domain, op, attribute):
    """Each exception above still names a native op that lacks the attribute."""
    handles = [h for h in kernels.op_table
               if h.name == op and ("" if h.domain in ("", "ai.onnx") else h.domain) == domain]
    assert handles, op
    for handle in handles:
        assert attribute not in {a["name"] for a in handle.schema()["attributes"]}
