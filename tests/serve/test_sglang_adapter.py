"""The SGLang adapter's request/response code against a local fake SGLang HTTP server.

SGLang does not install on these CPU machines; the fake implements the four endpoints the
adapter uses with the request and response shapes of SGLang's http_server.py. What this proves:
the adapter sends well-formed requests, parses streamed responses (ids, logprobs, finish
reasons), stages weights the server can load, tags versions, and re-queues aborted samples.
It does not prove SGLang itself behaves like the fake.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces import SamplingParams, WeightBucket, WeightReceiver
from dockyard.serve.engines.sglang import SGLangEngine, SGLangError, parse_generate_chunk


class FakeSGLang:
    """Generates token ``(last_input + 1 + weight_offset) % 1000`` with logprob ``-0.1 * k``;
    ``update_weights_from_disk`` reads ``offset`` from the staged safetensors."""

    def __init__(self, token_delay: float = 0.0) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.offset = 0
        self.paused = threading.Event()
        self.abort_gen = 0
        self.token_delay = token_delay
        self.loaded: dict[str, np.ndarray] = {}
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                return

            def _json(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                fake.requests.append((self.path, body))
                if self.path == "/generate":
                    return self._generate(body)
                if self.path == "/pause_generation":
                    if body.get("mode") == "abort":
                        fake.abort_gen += 1
                    fake.paused.set()
                    return self._json(
                        200, {"message": "Generation paused successfully.", "status": "ok"}
                    )
                if self.path == "/continue_generation":
                    fake.paused.clear()
                    return self._json(
                        200, {"message": "Generation continued successfully.", "status": "ok"}
                    )
                if self.path == "/update_weights_from_disk":
                    from safetensors.numpy import load_file

                    folder = Path(body["model_path"])
                    files = sorted(folder.glob("*.safetensors"))
                    if not files:
                        return self._json(
                            400,
                            {
                                "success": False,
                                "message": f"no weights in {folder}",
                                "num_paused_requests": 0,
                            },
                        )
                    for f in files:
                        fake.loaded.update(load_file(str(f)))
                    fake.offset = int(fake.loaded["offset"][0])
                    return self._json(
                        200,
                        {
                            "success": True,
                            "message": "Succeeded to update model weights.",
                            "num_paused_requests": 0,
                        },
                    )
                self._json(404, {"message": "not found"})

            def _generate(self, body: dict[str, Any]) -> None:
                sp = body["sampling_params"]
                assert body["return_logprob"] is True
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                gen = fake.abort_gen
                ids: list[int] = []
                rows: list[list[Any]] = []
                last = body["input_ids"][-1]
                reason: dict[str, Any] | None = None
                while reason is None:
                    while fake.paused.is_set() and fake.abort_gen == gen:
                        time.sleep(0.005)
                    if fake.abort_gen != gen:
                        reason = {"type": "abort", "message": "Abort by pause"}
                        break
                    time.sleep(fake.token_delay)
                    tok = (last + 1 + fake.offset) % 1000
                    last = tok
                    ids.append(tok)
                    rows.append([-0.1 * len(ids), tok, None])
                    if tok in sp.get("stop_token_ids", []):
                        reason = {"type": "stop", "matched": tok}
                    elif len(ids) >= sp["max_new_tokens"]:
                        reason = {"type": "length", "length": len(ids)}
                    chunk = {
                        "text": " ".join(map(str, ids)),
                        "output_ids": ids,
                        "meta_info": {
                            "output_token_logprobs": rows,
                            "finish_reason": reason,
                            "completion_tokens": len(ids),
                        },
                    }
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                if reason["type"] == "abort":
                    chunk = {
                        "text": "",
                        "output_ids": ids,
                        "meta_info": {"output_token_logprobs": rows, "finish_reason": reason},
                    }
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ListReceiver(WeightReceiver):
    def __init__(self, buckets: list[dict[str, np.ndarray]], version: int) -> None:
        self.buckets, self.version = buckets, version

    def receive(self):
        for i, b in enumerate(self.buckets):
            yield WeightBucket(self.version, i, i == len(self.buckets) - 1, b)


@pytest.fixture
def fake():
    f = FakeSGLang()
    yield f
    f.close()


def test_generate_request_and_response(fake: FakeSGLang) -> None:
    async def main():
        eng = await SGLangEngine(fake.url).start()
        return await eng.generate(
            [1, 2, 3],
            SamplingParams(n=2, max_tokens=5, temperature=0.7, top_k=20, seed=9, stop=["x"]),
        )

    res = asyncio.run(main())
    gens = [b for p, b in fake.requests if p == "/generate"]
    assert len(gens) == 2
    assert sorted(g["sampling_params"]["sampling_seed"] for g in gens) == [9, 10]
    g = gens[0]
    assert g["input_ids"] == [1, 2, 3]
    assert g["stream"] is True
    assert g["sampling_params"]["max_new_tokens"] == 5
    assert g["sampling_params"]["temperature"] == 0.7
    assert g["sampling_params"]["top_k"] == 20
    assert g["sampling_params"]["stop"] == ["x"]
    for r in res:
        assert r.token_ids.tolist() == [4, 5, 6, 7, 8]
        np.testing.assert_allclose(r.logprobs, [-0.1, -0.2, -0.3, -0.4, -0.5], rtol=1e-6)
        assert r.finish_reason == "length"
        assert r.policy_versions.tolist() == [0] * 5


def test_stop_token_and_update_weights_from_disk(fake: FakeSGLang, tmp_path: Path) -> None:
    async def main():
        eng = await SGLangEngine(fake.url, staging_dir=str(tmp_path)).start()
        stopped = (await eng.generate([10], SamplingParams(max_tokens=9, stop_token_ids=[12])))[0]
        w = {
            "offset": np.array([100], np.int64),
            "layer.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
        }
        await eng.update_weights(
            ListReceiver([{"offset": w["offset"]}, {"layer.weight": w["layer.weight"]}], 4), 4
        )
        after = (await eng.generate([10], SamplingParams(max_tokens=2)))[0]
        await eng.aclose()
        return eng, stopped, after, w

    eng, stopped, after, w = asyncio.run(main())
    assert stopped.token_ids.tolist() == [11, 12]
    assert stopped.finish_reason == "stop"
    upd = next(b for p, b in fake.requests if p == "/update_weights_from_disk")
    assert upd["weight_version"] == "4"
    assert upd["flush_cache"] is True
    assert Path(upd["model_path"]) == tmp_path / "v4"
    np.testing.assert_array_equal(fake.loaded["layer.weight"], w["layer.weight"])
    paths = [p for p, _ in fake.requests]
    i = paths.index("/update_weights_from_disk")
    assert paths[i - 1] == "/pause_generation"
    assert paths[i + 1] == "/continue_generation"  # auto pause/resume around the load
    assert eng.policy_version == 4
    assert after.token_ids.tolist() == [111, 212]  # served by the new weights (offset 100)
    assert after.policy_versions.tolist() == [4, 4]


def test_abort_pause_requeues_continuation(tmp_path: Path) -> None:
    fake = FakeSGLang(token_delay=0.01)
    try:

        async def main():
            eng = await SGLangEngine(fake.url, staging_dir=str(tmp_path)).start()
            task = asyncio.create_task(eng.generate([0], SamplingParams(max_tokens=40)))
            while not any(p == "/generate" for p, _ in fake.requests):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            await eng.pause("abort")
            await eng.update_weights(ListReceiver([{"offset": np.array([0], np.int64)}], 1), 1)
            await eng.resume()
            out = (await task)[0]
            await eng.aclose()
            return out

        r = asyncio.run(main())
    finally:
        fake.close()
    gens = [b for p, b in fake.requests if p == "/generate"]
    assert len(gens) == 2  # the aborted request was re-queued once, as a continuation
    k = len(gens[1]["input_ids"]) - 1
    assert 0 < k < 40
    assert gens[1]["sampling_params"]["max_new_tokens"] == 40 - k
    assert r.token_ids.tolist() == list(range(1, 41))
    assert r.finish_reason == "length"
    assert r.policy_versions.tolist() == [0] * k + [1] * (40 - k)
    assert [b["mode"] for p, b in fake.requests if p == "/pause_generation"] == ["abort"]


def test_errors_are_named(fake: FakeSGLang, tmp_path: Path) -> None:
    async def main():
        eng = await SGLangEngine(fake.url, staging_dir=str(tmp_path)).start()
        try:
            await eng._post("/update_weights_from_disk", {"model_path": str(tmp_path / "empty")})
        finally:
            await eng.aclose()

    with pytest.raises(
        SGLangError, match=r"update_weights_from_disk failed \(HTTP 400\): no weights"
    ):
        asyncio.run(main())
    with pytest.raises(SGLangError, match="disagree"):
        parse_generate_chunk(
            {
                "output_ids": [1, 2],
                "meta_info": {"output_token_logprobs": [[-1.0, 1, None], [-1.0, 3, None]]},
            }
        )
    with pytest.raises(SGLangError, match="return_logprob"):
        parse_generate_chunk({"output_ids": [1, 2], "meta_info": {}})
