"""FORMAT.md section 7's Ed25519 rule: cvmvm.tx.ed25519 against the plain reference, with every library.

The reference (tests/ed25519_ref.py) makes the signatures on the rule's edges that no
library would make: keys and nonces with a small-order component, small-order keys and
nonces, encodings that are not canonical, scalars not reduced.  Each library cvmvm may use
must give the reference's verdict on every one, and the self-test must tell apart the
verifiers that follow other rules.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings, strategies as st

from tests import ed25519_ref as ref
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from isa.errors import InternalError, MalformedError
from serializer.records.receipt import Receipt, Signer
from cvmvm.tx import ed25519, receipt

SEED = hashlib.sha256(b"cvmvm/ed25519/self-test").digest()
MESSAGE = b"cvmvm/ed25519/self-test"
OTHER_SEED = b"\x07" * 32


LIBRARIES = ed25519.candidates()


def _cofactorless_valid_mixed_key(seed: bytes, message: bytes, torsion: int) -> tuple[bytes, bytes]:
    """A key with a small-order component and a signature that holds without the cofactor:
    R = rB + T' where T' = -hT, found by trying nonces."""
    for r in range(1, 2000):
        for j in range(1, 8):
            public, signature = ref.sign(seed, message, key_torsion=ref.TORSION[torsion],
                                         nonce_torsion=ref.TORSION[j], nonce=r)
            if ref.valid(public, signature, message):
                return public, signature
    raise AssertionError("no such signature found")


def _signature_where_h_kills(public: bytes, point: ref.Point, message: bytes, tries: int) -> bytes | None:
    """R = rB, S = r for the first r < ``tries`` whose [h]``point`` is the identity, so that
    [S]B - [h]A = R: what OpenSSL accepts under a small-order key ``public`` naming ``point``."""
    for r in range(1, tries):
        big_r = ref.encode(ref.mul(r, ref.BASE))
        if ref.encode(ref.mul(ref.scalar(big_r, public, message), point)) == ref.encode(ref.IDENTITY):
            return big_r + r.to_bytes(32, "little")
    return None


def _small_key_signature(torsion: int, message: bytes) -> tuple[bytes, bytes]:
    public = ref.encode(ref.TORSION[torsion])
    signature = _signature_where_h_kills(public, ref.TORSION[torsion], message, 200)
    assert signature is not None, "no such signature found"
    return public, signature


def _non_canonical(y: int, sign: int) -> bytes:
    return ((y + ref.P) | (sign << 255)).to_bytes(32, "little")


def edge_cases() -> list[tuple[str, bytes, bytes, bytes]]:
    m = b"receipt"
    public, signature = ref.sign(OTHER_SEED, m)
    a, _ = ref.secret(OTHER_SEED)
    s = int.from_bytes(signature[32:], "little")
    cases = [("honest", public, signature, m),
             ("another message", public, signature, m + b"."),
             ("S + L", public, signature[:32] + (s + ref.L).to_bytes(32, "little"), m),
             ("S = L", public, signature[:32] + ref.L.to_bytes(32, "little"), m),
             ("short signature", public, signature[:63], m),
             ("short key", public[:31], signature, m)]
    for t in range(8):
        cases.append((f"nonce + T{t}", *ref.sign(OTHER_SEED, m, nonce_torsion=ref.TORSION[t]), m))
        cases.append((f"key + T{t}", *ref.sign(OTHER_SEED, m, key_torsion=ref.TORSION[t]), m))
        cases.append((f"small key T{t}", *_small_key_signature(t, m), m))
        small_r = ref.encode(ref.TORSION[t])
        h = ref.scalar(small_r, public, m)
        cases.append((f"small nonce T{t}", public, small_r + (h * a % ref.L).to_bytes(32, "little"), m))
    for t in (1, 3, 6):
        cases.append((f"key + T{t}, holding without the cofactor", *_cofactorless_valid_mixed_key(OTHER_SEED, m, t), m))
    # Encodings of y + p: for y = 0, 1 small-order points (OpenSSL takes them as keys), else
    # points of large order when y + p < 2^255 is on the curve.
    for y in range(0, 19):
        for sign in (0, 1):
            enc = _non_canonical(y, sign)
            point = ref.decode(enc, canonical=False)
            if point is None:
                continue
            forged = _signature_where_h_kills(enc, point, m, 60)
            if forged is not None:
                cases.append((f"non-canonical key y={y}+p sign {sign}", enc, forged, m))
            cases.append((f"non-canonical nonce y={y}+p sign {sign}", public, enc + signature[32:], m))
    identity = ref.encode(ref.IDENTITY)
    cases.append(("identity key, any message", identity, identity + bytes(32), b"anything at all"))
    cases.append(("x = 0 with the sign bit", (1 | 1 << 255).to_bytes(32, "little"), signature, m))
    return cases


EDGES = edge_cases()


@pytest.mark.parametrize("name, public, signature, message", EDGES, ids=[c[0] for c in EDGES])
def test_every_library_gives_the_reference_verdict_on_the_edges(name, public, signature, message):
    expected = ref.valid(public, signature, message)
    for library, verify in LIBRARIES:
        got = ed25519.well_formed(public, signature) and verify(public, signature, message)
        assert got == expected, (library, name)
    assert ed25519.valid(public, signature, message) == expected


def test_the_edges_include_what_openssl_alone_accepts():
    # Without steps 1 and 2 OpenSSL accepts these: the rule is what refuses them.
    accepted = [name for name, public, signature, message in EDGES
                if len(public) == 32 and len(signature) == 64 and ed25519.openssl(public, signature, message)
                and not ref.valid(public, signature, message)]
    assert any(n.startswith("small key") for n in accepted)
    assert any(n.startswith("non-canonical key") for n in accepted)
    assert "identity key, any message" in accepted
    assert "small nonce T0" in accepted


def test_the_edges_include_valid_signatures_under_keys_with_a_small_order_component():
    verdicts = {name: ref.valid(p, s, m) for name, p, s, m in EDGES}
    assert verdicts["honest"] and verdicts["key + T0"] and verdicts["nonce + T0"]
    assert all(verdicts[n] for n in verdicts if n.endswith("holding without the cofactor"))
    assert not any(verdicts[f"nonce + T{t}"] for t in range(1, 8))


@settings(max_examples=60, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=40),
       key_t=st.integers(0, 7), nonce_t=st.integers(0, 7),
       flip=st.one_of(st.none(), st.integers(0, 8 * 96 - 1)))
def test_libraries_agree_with_the_reference(seed, message, key_t, nonce_t, flip):
    public, signature = ref.sign(seed, message, key_torsion=ref.TORSION[key_t], nonce_torsion=ref.TORSION[nonce_t])
    if flip is not None:
        blob = bytearray(public + signature)
        blob[flip // 8] ^= 1 << (flip % 8)
        public, signature = bytes(blob[:32]), bytes(blob[32:])
    expected = ref.valid(public, signature, message)
    for library, verify in LIBRARIES:
        assert (ed25519.well_formed(public, signature) and verify(public, signature, message)) == expected, library


def test_the_self_test_vectors_are_the_references():
    honest = ref.sign(SEED, MESSAGE)
    mixed = _cofactorless_valid_mixed_key(SEED, MESSAGE, 1)
    nonce = ref.sign(SEED, MESSAGE, nonce_torsion=ref.TORSION[1])
    expected = [(honest, MESSAGE, True), (honest, MESSAGE + b"!", False), (mixed, MESSAGE, True), (nonce, MESSAGE, False)]
    assert len(ed25519.SELF_TEST) == len(expected)
    for (a, s, m, ok), ((public, signature), message, valid) in zip(ed25519.SELF_TEST, expected):
        assert (bytes.fromhex(a), bytes.fromhex(s), m, ok) == (public, signature, message, valid)
        assert ref.valid(public, signature, message) is valid
        assert ed25519.well_formed(public, signature)


def test_the_small_order_ys_are_the_references():
    assert ed25519.SMALL_ORDER_Y == {int.from_bytes(e, "little") & ((1 << 255) - 1) for e in ref.SMALL}
    assert (ed25519.P, ed25519.L) == (ref.P, ref.L)


def _cofactored(public: bytes, signature: bytes, message: bytes) -> bool:
    a, r = ref.decode(public), ref.decode(signature[:32])
    if a is None or r is None:
        return False
    h = ref.scalar(signature[:32], public, message)
    check = ref.add(r, ref.neg(ref.add(ref.mul(int.from_bytes(signature[32:], "little"), ref.BASE),
                                       ref.neg(ref.mul(h, a)))))
    return ref.encode(ref.mul(8, check)) == ref.encode(ref.IDENTITY)


def _subgroup_checking(public: bytes, signature: bytes, message: bytes) -> bool:
    a = ref.decode(public)
    return (a is not None and ref.encode(ref.mul(ref.L, a)) == ref.encode(ref.IDENTITY)
            and ref.valid(public, signature, message))


def test_the_self_test_refuses_verifiers_by_other_rules():
    assert not ed25519.passes_self_test(_cofactored)
    assert not ed25519.passes_self_test(_subgroup_checking)
    assert not ed25519.passes_self_test(lambda a, s, m: True)
    assert ed25519.passes_self_test(ref.valid)
    for library, verify in LIBRARIES:
        assert ed25519.passes_self_test(verify), library


def test_the_first_library_by_the_rule_is_used(monkeypatch):
    monkeypatch.setattr(ed25519, "candidates", lambda: [("cofactored", _cofactored), ("openssl", ed25519.openssl)])
    ed25519.backend.cache_clear()
    try:
        assert ed25519.backend()[0] == "openssl"
        monkeypatch.setattr(ed25519, "candidates", lambda: [("cofactored", _cofactored)])
        ed25519.backend.cache_clear()
        with pytest.raises(InternalError) as e:
            ed25519.valid(*ref.sign(OTHER_SEED, b"m"), b"m")
        assert e.value.code == "internal.signature"
    finally:
        ed25519.backend.cache_clear()


def test_libsodium_comes_first_when_installed():
    pytest.importorskip("nacl")
    assert ed25519.backend()[0] == "libsodium"


def test_a_receipt_signed_under_the_identity_key_is_not_valid():
    unsigned = Receipt(b"\x01" * 32, b"\x02" * 32, (("x", b"\x03" * 32),), b"\x04" * 32, b"\x05" * 32, 7)
    identity = ref.encode(ref.IDENTITY)
    forged = Receipt(unsigned.model_hash, unsigned.program_root, unsigned.inputs, unsigned.output_hash,
                     unsigned.trace_root, unsigned.ops, Signer(identity, identity + bytes(32)))
    Ed25519PublicKey.from_public_bytes(identity).verify(identity + bytes(32), forged.signing_message())  # OpenSSL's verdict
    assert not receipt.signature_valid(forged)
    assert receipt.unauthenticated(forged) == ("signature",)


@pytest.mark.parametrize("key", [ref.encode(t) for t in ref.TORSION] + [_non_canonical(0, 0), _non_canonical(1, 0),
                                                                      (1 | 1 << 255).to_bytes(32, "little")])
def test_a_signer_no_signature_can_be_valid_under_is_refused(key):
    with pytest.raises(MalformedError) as e:
        receipt.load_public_key(key, "signer.pub")
    assert e.value.code == "malformed.key"
    assert "no signature is valid under it" in e.value.message
