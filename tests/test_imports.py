"""Each command loads only what it runs: the request-path gateway and the GPU-host exporter never
import the analyzer's data stack, and no settings model does either."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "numpy", "analyzer", "sklearn")


def loaded(statement: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of ``heavy`` (or their submodules) a fresh interpreter holds after ``statement``."""
    code = (f"import json, sys\n{statement}\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    found: list[str] = json.loads(out)
    return found


@pytest.mark.parametrize("module", ["gateway.cli", "exporter.cli"])
def test_light_commands_import_no_data_stack(module: str) -> None:
    # pydantic too: about 0.1 s of start-up their settings dataclasses do without.
    assert loaded(f"import {module}", (*HEAVY, "pydantic")) == []


def test_the_pydantic_guard_can_fail() -> None:
    assert loaded("from oximeter.config import config_model\nconfig_model()", ("pydantic",)) == ["pydantic"]


def test_settings_models_import_neither_pandas_nor_numpy() -> None:
    # Every section's model, as ``oximeter config check`` composes them.
    statement = "from oximeter.config import config_model\nconfig_model()"
    assert [m for m in loaded(statement) if m != "analyzer"] == []
    # The guard can fail: the analyzer's catalogue does pull pandas in.
    assert "pandas" in loaded("import analyzer.signals.catalogue")


def test_the_incident_package_and_the_reporters_readers_stay_light() -> None:
    # The reporter reads and renders incidents from the store without the detection's data stack.
    statement = ("import analyzer.incidents.model, analyzer.incidents.store, analyzer.incidents.oncall, "
                 "analyzer.incidents.maintenance, analyzer.incidents.settings, "
                 "reporter.render, reporter.relay, reporter.callbacks")
    assert [m for m in loaded(statement) if m != "analyzer"] == []
    # The guard can fail: the lifecycle runs the diagnosis, which reads the catalogue.
    assert "pandas" in loaded("import analyzer.incidents.lifecycle")


def test_the_incident_commands_leave_scikit_learn_to_the_detector_that_fits() -> None:
    # ``oximeter incidents`` and the daemons load the diagnosis (and through it the detector
    # registry); scikit-learn's two seconds of start-up belong only to a detector that fits one.
    assert "sklearn" not in loaded("import analyzer.diagnosis.rules, analyzer.service.incidents_cli")
    # The guard can fail: fitting one does load it.
    assert "sklearn" in loaded("import numpy as np\n"
                               "from analyzer.detection.detectors.neighbours import NeighbourSurprise\n"
                               "NeighbourSurprise().surprise(np.sin(np.arange(2000.0)))")
