"""Library errors as one plain line in our messages."""

from __future__ import annotations

from otel_delta.errors import MAX_CAUSE_CHARS, describe


def test_colour_codes_and_line_breaks_are_removed_and_causes_kept() -> None:
    try:
        try:
            raise OSError("\x1b[31mconnection refused\x1b[0m\n  at 127.0.0.1:9")
        except OSError as cause:
            raise RuntimeError("Generic S3 error") from cause
    except RuntimeError as error:
        assert describe(error) == "Generic S3 error: connection refused at 127.0.0.1:9"


def test_long_messages_are_cut() -> None:
    text = describe(ValueError("x" * 5000))
    assert len(text) == MAX_CAUSE_CHARS and text.endswith("…")
    assert describe(ValueError()) == "ValueError"


def test_an_s3_error_body_loses_what_it_says_of_the_credentials() -> None:
    """A wrong secret key: S3's SignatureDoesNotMatch body names the access key id and the
    string it signed, and the whole body reached the one-line error, the logs and /readyz."""
    body = (
        "Generic S3 error: <?xml version='1.0'?><Error><Code>SignatureDoesNotMatch</Code>"
        "<Message>The request signature we calculated does not match</Message>"
        "<AWSAccessKeyId>AKIAREVIEWKEY</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256\n"
        "20261129T171200Z\nscope\nabc</StringToSign><SignatureProvided>f00</SignatureProvided>"
        "<CanonicalRequest>GET\n/bkt</CanonicalRequest></Error>"
    )
    text = describe(OSError(body))
    assert "SignatureDoesNotMatch" in text and "does not match" in text
    for secret in ("AKIAREVIEWKEY", "AWS4-HMAC-SHA256", "f00", "/bkt"):
        assert secret not in text
