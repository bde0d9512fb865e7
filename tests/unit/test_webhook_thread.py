"""The admission webhook answers from its own thread and event loop: a main loop that does not turn
(a tenant's reconcile) does not keep a review waiting (controller/admission.serve, adapters/webhook.LoopThread).

The main thread below blocks its event loop until the review's answer is in: with the webhook on the
main loop, the answer could never come and the wait would end at its timeout.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import urllib.request
from pathlib import Path

from sunk_sandbox_operator.controller import admission as wiring
from sunk_sandbox_operator.controller.config import Config

from tests.unit.fakes import FakeKube, Harness
from tests.unit.test_admission import review, write_pair


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_review_is_answered_while_the_main_loop_is_blocked(tmp_path: Path) -> None:
    write_pair(tmp_path, "localhost")
    port = free_port()
    h = Harness(config=Config(webhook_port=port, webhook_address="127.0.0.1", webhook_cert_dir=str(tmp_path)))
    loops: list[object] = []

    def client() -> FakeKube:  # made on the webhook's own loop
        import asyncio
        loops.append(asyncio.get_running_loop())
        return FakeKube()

    server = await wiring.serve(h.ctx, client=client)
    assert server is not None
    answers: list[dict] = []
    answered = threading.Event()

    def post() -> None:
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        request = urllib.request.Request(f"https://127.0.0.1:{port}/validate", data=json.dumps(review()).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10, context=insecure) as r:
            answers.append(json.loads(r.read()))
        answered.set()

    try:
        threading.Thread(target=post, daemon=True).start()
        assert answered.wait(10), "the review waited for the blocked main loop"  # blocks this loop meanwhile
        assert answers[0]["response"]["allowed"] is True and answers[0]["response"]["uid"] == "rev-1"
        import asyncio
        assert loops and loops[0] is not asyncio.get_running_loop()
    finally:
        await server.stop()
    assert not server._thread.is_alive()
