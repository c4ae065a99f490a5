"""The job service reads a request body as every JSON reader would: a body that readers read
differently (a key given twice, NaN or an infinity, a number as text) is a 400, and it never
reaches the store, where it used to turn every later ``GET /jobs`` of its tenant into a 500."""

import json

from tests.tenancy.test_job_service import SLEEPY, VISION
from tests.tenancy.test_service_hardening import post, request, status_of, strict  # noqa: F401 - the fixture

BASE = {"source_name": "sleepy.py", "source_text": SLEEPY, "params": {"SECONDS": 0.01}}


def answer_of(raw: bytes) -> tuple[int, str]:
    status_and_body = raw.partition(b"\r\n\r\n")
    return status_of(raw), json.loads(status_and_body[2]).get("error", "")


def test_bodies_that_json_readers_read_differently_are_refused_and_the_listing_still_works(strict):  # noqa: F811
    text = json.dumps(SLEEPY)
    bodies = {
        "a key twice": (f'{{"source_name": "sleepy.py", "source_text": {text}, "gpus": 1, "gpus": 2}}'.encode(),
                        "'gpus' appears twice"),
        "a NaN param": (json.dumps({**BASE, "params": {"SECONDS": float("nan")}}).encode(), "NaN"),
        "an infinite param": (json.dumps({**BASE, "params": {"SECONDS": float("-inf")}}).encode(), "-Infinity"),
        "a share as text": (json.dumps({**BASE, "share": "0.5"}).encode(), "share"),
    }
    for what, (raw, needle) in bodies.items():
        status, error = answer_of(request(strict.url, post("/jobs", raw)))
        assert status == 400, (what, error)
        assert needle in error, (what, error)
    listing = request(strict.url, f"GET /jobs?all=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {VISION}\r\n\r\n"
                      .encode())
    assert status_of(listing) == 200
    assert json.loads(listing.partition(b"\r\n\r\n")[2]) == {"jobs": []}


def test_files_named_like_a_module_the_worker_imports_are_refused(strict):  # noqa: F811
    # The worker runs in the job's folder, first on its path: a submitted numpy.py or json.py
    # used to replace the real module, and the job died with a traceback and no exit note.
    bodies = {"a module numpy.py": {**BASE, "modules": {"numpy.py": "x = 1\n"}},
              "a package streammap/": {**BASE, "modules": {"streammap/plan.py": "x = 1\n"}},
              "a program json.py": {**BASE, "source_name": "json.py"}}
    for what, body in bodies.items():
        status, error = answer_of(request(strict.url, post("/jobs", json.dumps(body).encode())))
        assert status == 400, (what, error)
        assert "rename it" in error, (what, error)
    ok = {**BASE, "modules": {"helpers.py": "x = 1\n"}}
    status, error = answer_of(request(strict.url, post("/jobs", json.dumps(ok).encode())))
    assert status == 201, error


def test_a_body_that_is_not_declared_json_is_a_415_before_it_is_read(strict):  # noqa: F811
    """A submission says what it is: text/plain (what a web page may send anywhere without asking)
    or a form was read as JSON all the same, and queued."""
    raw = json.dumps(BASE).encode()
    for declared in (b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data; boundary=x", None):
        head = post("/jobs", raw).replace(b"Content-Type: application/json\r\n",
                                          b"" if declared is None else b"Content-Type: " + declared + b"\r\n")
        status, error = answer_of(request(strict.url, head))
        assert status == 415 and "Content-Type: application/json" in error, (declared, error)
    for declared in (b"application/json; charset=utf-8", b"Application/JSON"):
        head = post("/jobs", raw).replace(b"Content-Type: application/json", b"Content-Type: " + declared)
        assert status_of(request(strict.url, head)) == 201, declared
    listing = request(strict.url, f"GET /jobs?all=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {VISION}\r\n\r\n"
                      .encode())
    assert len(json.loads(listing.partition(b"\r\n\r\n")[2])["jobs"]) == 2


def test_a_submitted_share_below_a_millionth_is_a_field_error():
    """As a kernel's share clause (ir.MIN_SHARE)."""
    import pydantic
    import pytest

    from streammap.tenancy.api import SubmitRequest, explain
    with pytest.raises(pydantic.ValidationError) as info:
        SubmitRequest.model_validate_json(json.dumps({**BASE, "share": 1e-320}))
    assert "field 'share': Input should be greater than or equal to 0.000001" in explain(info.value)
    assert SubmitRequest.model_validate_json(json.dumps({**BASE, "share": 1e-6})).share == 1e-6
