"""Secrets at rest (Fernet, rotation, no default key) and webhook signatures (HMAC, replay window)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from herald.delivery.crypto import SecretBox, SecretKeyError, new_key, secret_box
from herald.delivery.signing import signature, signed_headers, verify

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


class TestSecretBox:
    def test_sealed_value_is_not_the_secret_and_opens_back(self) -> None:
        box = SecretBox(new_key())
        sealed = box.seal({"password": "hunter2-long"}, NOW)
        assert "hunter2" not in sealed
        assert box.open(sealed) == {"password": "hunter2-long"}

    def test_rotation_new_key_first_still_opens_old_values(self) -> None:
        old, new = new_key(), new_key()
        sealed_before = SecretBox(old).seal({"hmac_secret": "x" * 20}, NOW)
        rotated = SecretBox(f"{new},{old}")
        assert rotated.open(sealed_before) == {"hmac_secret": "x" * 20}
        sealed_after = rotated.seal({"hmac_secret": "y" * 20}, NOW)
        assert SecretBox(new).open(sealed_after) == {"hmac_secret": "y" * 20}

    def test_another_key_cannot_open(self) -> None:
        sealed = SecretBox(new_key()).seal({"password": "p"}, NOW)
        with pytest.raises(SecretKeyError, match="cannot be opened"):
            SecretBox(new_key()).open(sealed)

    @pytest.mark.parametrize("key", [None, "", "  "])
    def test_no_key_means_no_secrets(self, key: str | None) -> None:
        with pytest.raises(SecretKeyError, match="HERALD_SECRET_KEY is not set"):
            secret_box(key)

    def test_a_malformed_key_is_refused(self) -> None:
        with pytest.raises(SecretKeyError, match="Fernet keys"):
            secret_box("not-a-fernet-key")


class TestSignature:
    SECRET = "s" * 32
    BODY = b'{"id":"abc","message":{"title":"Hi"}}'

    def test_receiver_verifies_what_was_signed(self) -> None:
        headers = signed_headers(self.SECRET, 1_700_000_000, self.BODY, "d1")
        assert headers["X-Herald-Signature"].startswith("sha256=")
        assert headers["X-Herald-Delivery"] == "d1"
        assert verify(
            self.SECRET,
            self.BODY,
            headers["X-Herald-Timestamp"],
            headers["X-Herald-Signature"],
            1_700_000_010,
        )

    def test_tampered_body_fails(self) -> None:
        signed = signature(self.SECRET, 1_700_000_000, self.BODY)
        assert not verify(self.SECRET, self.BODY.replace(b"Hi", b"Ho"), "1700000000", signed, 1_700_000_000)

    def test_wrong_secret_fails(self) -> None:
        signed = signature(self.SECRET, 1_700_000_000, self.BODY)
        assert not verify("t" * 32, self.BODY, "1700000000", signed, 1_700_000_000)

    def test_timestamp_is_signed_so_it_cannot_be_moved(self) -> None:
        signed = signature(self.SECRET, 1_700_000_000, self.BODY)
        assert not verify(self.SECRET, self.BODY, "1700000300", signed, 1_700_000_300)

    @pytest.mark.parametrize("age", [301, -301, 10_000])
    def test_old_or_future_requests_are_replays(self, age: int) -> None:
        signed = signature(self.SECRET, 1_700_000_000, self.BODY)
        assert not verify(self.SECRET, self.BODY, "1700000000", signed, 1_700_000_000 + age)

    @pytest.mark.parametrize(
        ("timestamp", "signed"), [(None, "sha256=00"), ("17x", "sha256=00"), ("1", None)]
    )
    def test_missing_headers_fail(self, timestamp: str | None, signed: str | None) -> None:
        assert not verify(self.SECRET, self.BODY, timestamp, signed, 1)
