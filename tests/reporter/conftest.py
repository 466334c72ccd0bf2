"""Fixtures for the reporter: the shared chat receiver and channels pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chat_receiver import ChatReceiver, MakeChannel
from pydantic import SecretStr

from reporter.channels import CHANNELS, Channel


@pytest.fixture
def receiver() -> Iterator[ChatReceiver]:
    """A started receiver on a free port, stopped at teardown."""
    server = ChatReceiver().start()
    yield server
    server.stop()


@pytest.fixture
def make_channel(receiver: ChatReceiver) -> MakeChannel:
    """``make_channel(service, secret=..., clock=...)``: a channel configured for the receiver."""

    def make(service: str, *, secret: str | bool | None = True, **kwargs: object) -> Channel:
        secret_text = receiver.secrets.get(service) if secret is True else (secret or None)
        return CHANNELS[service](
            f"test-{service}", SecretStr(receiver.url(service)),
            SecretStr(secret_text) if isinstance(secret_text, str) else None, **kwargs)  # type: ignore[arg-type]

    return make

