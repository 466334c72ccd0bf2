"""The fake pynvml cannot drift: every name it offers exists in the installed nvidia-ml-py with the
same signature, value or error code, and every pynvml name the backend uses is in the fake."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import fake_pynvml
import pynvml
import pytest
from fake_pynvml import FakeNvml

import exporter.backends.nvml as nvml_backend

FAKE = FakeNvml()
PUBLIC = sorted(n for n in dir(FakeNvml) if n.startswith(("nvml", "NVML")))
FUNCTIONS = [n for n in PUBLIC if callable(getattr(FAKE, n)) and not isinstance(getattr(FAKE, n), type)]
ERRORS = [n for n in PUBLIC if isinstance(getattr(FAKE, n), type)]
CONSTANTS = [n for n in PUBLIC if n not in FUNCTIONS and n not in ERRORS]


def test_the_fake_covers_something() -> None:
    assert len(FUNCTIONS) >= 20 and len(ERRORS) >= 8 and len(CONSTANTS) >= 15


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_have_pynvml_signatures(name: str) -> None:
    real = inspect.signature(getattr(pynvml, name))
    fake = inspect.signature(getattr(FAKE, name))
    assert [(p.name, p.kind, p.default) for p in fake.parameters.values()] == \
           [(p.name, p.kind, p.default) for p in real.parameters.values()]


@pytest.mark.parametrize("name", CONSTANTS)
def test_constants_have_pynvml_values(name: str) -> None:
    assert getattr(FAKE, name) == getattr(pynvml, name)


@pytest.mark.parametrize("name", ERRORS)
def test_error_classes_have_pynvml_codes(name: str) -> None:
    real_cls = getattr(pynvml, name)
    fake_cls = getattr(FAKE, name)
    assert issubclass(real_cls, pynvml.NVMLError)
    if name != "NVMLError":
        assert fake_cls().value == real_cls().value
        assert issubclass(fake_cls, fake_pynvml.NVMLError)


def test_module_level_sentinels_match() -> None:
    assert pynvml.NVML_VALUE_NOT_AVAILABLE_uint.value == fake_pynvml.UINT_NA
    assert pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value == fake_pynvml.ULL_NA


def test_every_pynvml_name_the_backend_uses_is_faked() -> None:
    source = Path(nvml_backend.__file__).read_text()
    used = set(re.findall(r"\bnvml\.(\w+)", source))
    used |= set(re.findall(r'"(nvml[A-Z]\w+|NVML\w+)"', source))
    optional = {"NVMLLibraryMismatchError"}  # looked up with getattr, absent in older pynvml
    assert used - optional, "the pattern found nothing: the test would pass vacuously"
    missing = sorted(n for n in used - optional if not hasattr(FAKE, n))
    assert missing == []
    assert all(hasattr(pynvml, n) for n in used)
