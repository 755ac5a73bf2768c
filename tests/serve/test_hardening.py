"""Issue 35's reproductions against a real server: limits on the bytes read, every user mistake a 4xx in
OpenAI's error shape naming the field, exact voice ids, one voice per name under concurrency, every answer
counted by status."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import pytest

from tests.serve.conftest import API_KEY, register_voice, wav_bytes

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def narrator(server):
    return register_voice(server[0], "Narrator")


def _refused(answer: httpx.Response, status: int, param: str | None) -> dict:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param, error
    return error


def test_a_chunked_body_over_the_limit_is_cut_off_with_413(server, client):
    def body():
        for _ in range(64):  # 64 MiB without a Content-Length
            yield b" " * (1 << 20)

    answer = client.post("/v1/audio/speech", content=body(), headers={"content-type": "application/json"})
    _refused(answer, 413, None)
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("instructions", "x" * 5000),
        ("reference_text", "x" * 5000),
        ("voice", "v" * 500),
        ("model", "m" * 500),
    ],
)
def test_every_text_field_has_a_cap(client, narrator, field, value):
    _refused(
        client.post("/v1/audio/speech", json={"input": "Hi.", "voice": narrator, field: value}), 422, field
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"seed": 2**64}, "seed"),
        ({"seed": -1}, "seed"),
        ({"input": "...!?"}, "input"),
        ({"input": "\u0000"}, "input"),
        ({"input": "Hi.", "instructions": "Say it \u0007 now."}, "instructions"),
        ({"input": "Hi.", "voice": "../../narrator"}, "voice"),
        ({"input": "Hi.", "voice": "NARRATOR"}, "voice"),
        ({"input": "Hi.", "speed": 100}, "speed"),
        (
            {"input": "Hi.", "reference_audio": base64.b64encode(b"RIFF not audio").decode(), "voice": ""},
            "reference_audio",
        ),
    ],
)
def test_user_mistakes_are_4xx_naming_the_field(client, narrator, body, param):
    answer = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": narrator, **body})
    assert 400 <= answer.status_code < 500, answer.text
    _refused(answer, answer.status_code, param)


def test_a_lone_surrogate_and_broken_json_are_422(client, narrator):
    raw = b'{"input": "\\ud800 hello", "voice": "' + narrator.encode() + b'"}'
    _refused(
        client.post("/v1/audio/speech", content=raw, headers={"content-type": "application/json"}),
        422,
        "input",
    )
    broken = client.post(
        "/v1/audio/speech", content=b'{"input": ', headers={"content-type": "application/json"}
    )
    assert broken.status_code == 422 and "error" in broken.json()
    assert client.get("/v1/nothing-here").json()["error"]["code"] == "not_found"


def test_a_40_s_reference_audio_is_refused_naming_the_field(client):
    body = {"input": "Hi.", "reference_audio": base64.b64encode(wav_bytes(40.0)).decode()}
    answer = client.post("/v1/audio/speech", json=body)
    assert 400 <= answer.status_code < 500
    _refused(answer, answer.status_code, "reference_audio")


def test_an_hour_of_silence_is_refused_from_its_header_in_milliseconds(server, client):
    base, _ = server
    flac = wav_bytes(3600.0, 8000, "FLAC", silent=True)
    started = time.perf_counter()
    answer = client.post("/v1/voices", data={"name": "Silence"}, files={"audio": ("s.flac", flac)})
    assert time.perf_counter() - started < 1.0
    _refused(answer, 413, "audio")
    started = time.perf_counter()
    answer = client.post(
        "/v1/audio/speech", json={"input": "Hi.", "reference_audio": base64.b64encode(flac).decode()}
    )
    assert time.perf_counter() - started < 1.0 and 400 <= answer.status_code < 500
    _refused(answer, answer.status_code, "reference_audio")


def test_voice_ids_match_exactly(client, narrator):
    made = client.post("/v1/voices", data={"name": "Victim2"}, files={"audio": ("v.wav", wav_bytes(3.0))})
    assert made.status_code == 201 and made.json()["id"] == "victim2"
    _refused(client.delete("/v1/voices/VICTIM2!!"), 404, "voice_id")
    _refused(client.delete("/v1/voices/Victim2"), 404, "voice_id")
    assert "victim2" in [v["id"] for v in client.get("/v1/voices").json()["data"]]
    assert client.delete("/v1/voices/victim2").status_code == 200


def test_eight_concurrent_registrations_of_one_name_make_one_voice(server):
    base, _ = server
    data = wav_bytes(3.0)

    def post_at_once(times: int, form: dict) -> list[int]:
        codes: list[int] = []

        def post() -> None:
            answer = httpx.post(
                f"{base}/v1/voices", headers=AUTH, data=form, files={"audio": ("t.wav", data)}, timeout=120
            )
            codes.append(answer.status_code)

        threads = [threading.Thread(target=post) for _ in range(times)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        return codes

    assert sorted(post_at_once(8, {"name": "Twin"})) == [201] + [409] * 7
    names = [v["name"] for v in httpx.get(f"{base}/v1/voices", headers=AUTH).json()["data"]]
    assert names.count("Twin") == 1
    codes = post_at_once(4, {"name": "Twin", "overwrite": "true"})
    assert all(code in (201, 409) for code in codes) and len(codes) == 4


@pytest.mark.parametrize(("name", "transcript"), [("a\u0000b", ""), ("n" * 10_000, ""), ("Ok", "t" * 5000)])
def test_voice_names_and_transcripts_are_checked(client, name, transcript):
    answer = client.post(
        "/v1/voices",
        data={"name": name, "transcript": transcript},
        files={"audio": ("v.wav", wav_bytes(3.0))},
    )
    _refused(answer, 422, "transcript" if transcript else "name")


def test_metrics_count_every_answer_by_status(server, client):
    from prometheus_client.parser import text_string_to_metric_families

    base, _ = server
    httpx.get(f"{base}/v1/voices")  # 401
    client.get("/v1/nowhere")  # 404
    client.post("/v1/audio/speech", json={"input": ""})  # 422
    client.post(
        "/v1/audio/speech", content=b" " * (5 << 20), headers={"content-type": "application/json"}
    )  # 413
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    counted = {
        s.labels["status"]: s.value
        for s in families["cosyvoice_http_responses"].samples
        if s.name.endswith("_total")
    }
    assert all(counted.get(code, 0) >= 1 for code in ("401", "404", "413", "422", "200")), counted


def test_decoding_a_reference_leaves_the_event_loop_free(server, client, monkeypatch):
    from studio.serve import formats

    real_decode = formats.decode_upload

    def slow_decode(*args, **kwargs):
        time.sleep(2.0)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(formats, "decode_upload", slow_decode)
    body = {"input": "Hi.", "reference_audio": base64.b64encode(wav_bytes(3.0)).decode()}
    worker = threading.Thread(target=lambda: client.post("/v1/audio/speech", json=body))
    worker.start()
    time.sleep(0.3)
    started = time.perf_counter()
    assert httpx.get(f"{server[0]}/health", timeout=10).status_code == 200
    assert time.perf_counter() - started < 1.0
    worker.join(60)


def test_the_openai_sdk_gets_audio_and_readable_refusals(server, narrator):
    openai = pytest.importorskip("openai")
    sdk = openai.OpenAI(base_url=f"{server[0]}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    audio = sdk.audio.speech.create(model="cosyvoice2", voice=narrator, input="Hello.", response_format="wav")
    assert audio.content[:4] == b"RIFF"
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.audio.speech.create(model="cosyvoice2", voice=narrator, input="Hi.", extra_body={"seed": 2**64})
    assert refused.value.status_code == 422 and "seed" in str(refused.value)
