"""Secrets come from the environment or a file, never from argv or the config file itself."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import SecretStr

from oximeter.errors import SecretMissingError


def read_secret(env_name: str, *, required: bool = False) -> SecretStr | None:
    """Read secret ``env_name`` from the environment, or from the file named by ``{env_name}_FILE``.

    The file form suits Docker/Kubernetes secrets; a trailing newline is dropped.
    """
    value = os.environ.get(env_name)
    if value is None:
        file_name = os.environ.get(f"{env_name}_FILE")
        if file_name:
            try:
                value = Path(file_name).read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as exc:
                # The path is not secret; the content is never read into the message.
                problem = f"{env_name}_FILE: cannot read {file_name}: {exc.strerror}"
                raise SecretMissingError([problem]) from None
    if value:
        return SecretStr(value)
    if required:
        raise SecretMissingError([f"secret {env_name} is not set (set {env_name} or {env_name}_FILE)"])
    return None
