"""Key material of issue 11: the accepted forms of a key, key ids, and the keyed chain."""

from __future__ import annotations

import base64
from uuid import UUID

import pytest

from turnledger.store.keys import InvalidKey, key_id, parse_key
from turnledger.store.mapper import ZERO_CHAIN, chain_digest, keyed_chain_digest

RAW = bytes(range(32))


@pytest.mark.parametrize(
    "given",
    [RAW, base64.b64encode(RAW).decode(), RAW.hex(), base64.urlsafe_b64encode(RAW).decode(),
     f"  {base64.b64encode(RAW).decode()}\n", base64.b64encode(RAW)],
    ids=["raw", "base64", "hex", "urlsafe", "padded-text", "base64-bytes"],
)
def test_a_key_is_32_bytes_as_raw_base64_or_hex(given: bytes | str) -> None:
    """Every accepted form gives the same 32 bytes."""
    assert RAW == parse_key(given)


@pytest.mark.parametrize("given", ["", "hunter2", RAW.hex()[:-2], base64.b64encode(RAW[:16])])
def test_anything_else_is_an_invalid_key_that_is_never_echoed(given: bytes | str) -> None:
    """Wrong length or alphabet: `InvalidKey` naming what a key must be, not the value."""
    with pytest.raises(InvalidKey) as caught:
        parse_key(given, "audit key")
    text = str(caught.value)
    assert ("the audit key must be 32 bytes" in text, "hunter2" in text) == (True, False)


def test_key_ids_differ_per_key_and_purpose_and_do_not_contain_the_key() -> None:
    """A key id tells keys apart without revealing them."""
    other = bytes(32)
    ids = {key_id(RAW, "master"), key_id(RAW, "audit"), key_id(other, "master")}
    assert 3 == len(ids)
    assert all(len(i) == 16 and i not in RAW.hex() for i in ids)


def test_the_keyed_chain_depends_on_the_audit_key() -> None:
    """Same bytes, three chains: unkeyed, and under two audit keys."""
    args = (ZERO_CHAIN, UUID(int=1), 1, "turnledger:x", b"payload")
    chains = {chain_digest(*args), keyed_chain_digest(RAW, *args),
              keyed_chain_digest(bytes(32), *args)}
    assert 3 == len(chains)
