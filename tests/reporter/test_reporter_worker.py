"""The delivery loop around ``deliver_due``: a thread for the daemon, a coroutine for asyncio."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from chat_receiver import ChatReceiver, MakeChannel
from sample_messages import alert

from oximeter.store import connect
from reporter.outbox import Outbox
from reporter.worker import DeliveryWorker, deliver_forever
from stack.procs import wait_until


def test_thread_worker_delivers_until_stopped(tmp_path: Path, receiver: ChatReceiver,
                                              make_channel: MakeChannel) -> None:
    outbox = Outbox(connect(tmp_path / "oximeter.db"), {"ops": make_channel("webhook")})
    worker = DeliveryWorker(outbox, interval_s=0.05).start()
    try:
        outbox.enqueue(alert("k1"), now=time.time())
        outbox.enqueue(alert("k2"), now=time.time())
        wait_until(lambda: receiver.accepted_keys() == {"k1": 1, "k2": 1}, 30, what="both delivered")
    finally:
        worker.stop()
    assert worker._thread is not None and not worker._thread.is_alive()
    assert [row.state for row in outbox.rows()] == ["sent", "sent"]


def test_async_runner_delivers_until_stopped(tmp_path: Path, receiver: ChatReceiver,
                                             make_channel: MakeChannel) -> None:
    outbox = Outbox(connect(tmp_path / "oximeter.db"), {"ops": make_channel("webhook")})

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(deliver_forever(outbox, stop, interval_s=0.05))
        outbox.enqueue(alert("k1"), now=time.time())

        async def delivered() -> None:
            while receiver.accepted_keys() != {"k1": 1}:
                await asyncio.sleep(0.05)
        await asyncio.wait_for(delivered(), 30)
        stop.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert [row.state for row in outbox.rows()] == ["sent"]
