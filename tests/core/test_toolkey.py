import pytest

from trails.core.toolkey import ToolPolicy, canonical_args, normalise_path, tool_result_key

READ = ToolPolicy("read_file", True, 60, ignore_args=frozenset({"intention"}), path_args=frozenset({"path"}))
PER_USER = ToolPolicy("inbox", True, 60, per_caller=True)


def key(args, context=None, caller=None, policy=READ, scope="s"):
    return tool_result_key(scope, policy, args, context or {"commit": "abc"}, caller)


@pytest.mark.parametrize(
    "a,b",
    [
        ({"path": "b.py", "mode": "read"}, {"path": "b.py", "mode": "write"}),
        ({"path": "b.py", "limit": 1}, {"path": "b.py", "limit": "1"}),
        ({"path": "b.py", "offset": 0}, {"path": "b.py", "offset": 50}),
        ({"path": "b.py", "page_token": "x"}, {"path": "b.py"}),
        ({"path": "a/b.py"}, {"path": "b.py"}),
    ],
)
def test_different_calls_never_share_a_key(a, b):
    assert key(a) != key(b)


def test_context_version_scope_and_caller_are_part_of_the_key():
    assert key({"path": "b.py"}, {"commit": "abc"}) != key({"path": "b.py"}, {"commit": "def"})
    assert key({"path": "b.py"}, scope="s1") != key({"path": "b.py"}, scope="s2")
    assert key({}, caller="ann", policy=PER_USER) != key({}, caller="bob", policy=PER_USER)
    # Without per-caller keying, the caller does not split the cache.
    assert key({"path": "b.py"}, caller="ann") == key({"path": "b.py"}, caller="bob")


@pytest.mark.parametrize(
    "a,b",
    [
        ({"path": "./a/../b.py"}, {"path": "b.py"}),
        ({"path": "b.py", "mode": "read"}, {"mode": "read", "path": "b.py"}),
        ({"path": "b.py", "intention": "look for the bug"}, {"path": "b.py", "intention": "check imports"}),
    ],
)
def test_equivalent_calls_share_a_key(a, b):
    assert key(a) == key(b)


def test_per_caller_tool_needs_a_caller():
    with pytest.raises(ValueError, match="caller is required"):
        key({}, policy=PER_USER)


def test_canonical_args_keep_unknown_arguments_and_types():
    assert canonical_args({"z": [1, "1"], "a": {"y": 2, "x": True}}, READ) == '{"a":{"x":true,"y":2},"z":[1,"1"]}'


def test_path_normalisation():
    assert normalise_path("./src/../src/./app.py") == "src/app.py"
    assert normalise_path("a\\b.py") == "a/b.py"
