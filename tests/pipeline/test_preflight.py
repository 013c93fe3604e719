"""make repro's params check before DVC runs (DVC removes outputs before it sees a missing dep)."""

import shutil
from pathlib import Path

import yaml

from gnnpipe.preflight import main, missing_inputs

REPO = Path(__file__).resolve().parents[2]


def params_with_path(folder: Path, path: str) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["dataset"]["path"] = path
    out = folder / "params.yaml"
    out.write_text(yaml.safe_dump(params))
    return out


def test_an_existing_dataset_path_passes(tmp_path):
    (tmp_path / "raw").mkdir()
    assert missing_inputs(params_with_path(tmp_path, "raw")) == []



def test_paths_are_relative_to_the_params_folder_like_dvc(tmp_path, monkeypatch):
    (tmp_path / "raw").mkdir()
    params = params_with_path(tmp_path, "raw")
    monkeypatch.chdir(REPO / "tests")  # no ./raw here
    assert missing_inputs(params) == []
    shutil.rmtree(tmp_path / "raw")
    assert len(missing_inputs(params)) == 1


def test_a_bad_key_is_the_loaders_one_line(tmp_path, capsys):
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  lrr: 1\n")
    assert main(["--params", str(path)]) == 1
    assert "unknown key train.lrr" in capsys.readouterr().err
