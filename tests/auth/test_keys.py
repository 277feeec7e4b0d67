"""The job's authentication key (plugin/_auth/keys.py): where init_rpc takes it from, and the
checks that raise before anything starts (docs/security.md). Moved from tests/rpc/test_rpc_init.py."""
import pytest


def test_where_the_authentication_key_comes_from(tmp_path, monkeypatch):
    """docs/security.md: the argument wins over GILFREE_RPC_AUTH_KEY, the variable over the file
    GILFREE_RPC_AUTH_KEY_FILE names (read as read_auth_key_file reads it: trailing whitespace
    dropped); a short key or a wrong type raises before anything starts, naming where it came from."""
    from plugin import _auth as plugin_auth
    from plugin import rpc as plugin_rpc

    key_file = tmp_path / "key"
    key_file.write_text("f" * 64 + "\n")
    monkeypatch.delenv("GILFREE_RPC_AUTH_KEY", raising=False)
    monkeypatch.delenv("GILFREE_RPC_AUTH_KEY_FILE", raising=False)
    assert plugin_auth.job_key(None) is None
    monkeypatch.setenv("GILFREE_RPC_AUTH_KEY_FILE", str(key_file))
    assert plugin_auth.job_key(None) == b"f" * 64 == plugin_rpc.read_auth_key_file(str(key_file))
    monkeypatch.setenv("GILFREE_RPC_AUTH_KEY", "e" * 40)
    assert plugin_auth.job_key(None) == b"e" * 40
    assert plugin_auth.job_key("d" * 32) == b"d" * 32
    with pytest.raises(TypeError, match=r"^init_rpc\(\): auth_key must be str or bytes, got int$"):
        plugin_auth.job_key(12345)
    with pytest.raises(ValueError, match=r"^init_rpc\(\): auth_key has 5 bytes; at least 16 are needed"):
        plugin_auth.job_key("short")
    monkeypatch.setenv("GILFREE_RPC_AUTH_KEY", "short")
    with pytest.raises(ValueError, match=r"^init_rpc\(\): GILFREE_RPC_AUTH_KEY has 5 bytes"):
        plugin_auth.job_key(None)
    monkeypatch.delenv("GILFREE_RPC_AUTH_KEY")
    key_file.write_text("short\n")
    with pytest.raises(ValueError, match=r"the authentication key in '.*key' has 5 bytes; at least 16 are needed"):
        plugin_auth.job_key(None)
    monkeypatch.setenv("GILFREE_RPC_AUTH_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        plugin_auth.job_key(None)
