"""No Docker engine runs here: the compose file is checked by reading it."""

import re

import pytest
import yaml

from app.cli import cli, load_plugins
from app.config import ROOT


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _cli_commands() -> set[str]:
    load_plugins()  # `ebc worker` joins the CLI through the worker's entry point
    names = {c.name or c.callback.__name__ for c in cli.registered_commands}
    return names | {g.name for g in cli.registered_groups}


def test_services_and_healthchecks(compose):
    services = compose["services"]
    assert set(services) == {"db", "web", "worker"}
    assert services["db"]["image"].startswith("postgres:")
    assert int(services["db"]["image"].split(":")[1]) >= 15
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert "/healthz" in " ".join(services["web"]["healthcheck"]["test"])
    assert any(v.startswith("pgdata:") for v in services["db"]["volumes"])
    for name in ("web", "worker"):
        assert services[name]["depends_on"]["db"]["condition"] == "service_healthy"


def test_commands_are_real_cli_commands(compose):
    commands = _cli_commands()
    for name in ("web", "worker"):
        cmd = compose["services"][name]["command"]
        assert cmd[0] == "ebc" and cmd[1] in commands, cmd
    assert compose["services"]["web"]["command"][1] == "serve"
    assert compose["services"]["worker"]["command"][1] == "worker"


def test_app_environment_is_production_on_postgres(compose):
    for name in ("web", "worker"):
        env = compose["services"][name]["environment"]
        assert env["EBC_ENV"] == "production"
        assert env["DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "EBC_SECRET_KEY" in env


def test_worker_gets_a_gpu_and_a_model_cache(compose):
    worker = compose["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert any(v.startswith("hf-cache:") for v in worker["volumes"])
    assert worker["environment"]["HF_HOME"] == "/hf-cache"


def _dockerfiles(compose) -> dict[str, str]:
    return {
        name: (ROOT / compose["services"][name]["build"]["dockerfile"]).read_text()
        for name in ("web", "worker")
    }


def test_dockerfiles_exist_and_only_the_worker_installs_torch(compose):
    files = _dockerfiles(compose)
    web_instructions = [ln for ln in files["web"].splitlines() if not ln.startswith("#")]
    assert not any("torch" in ln or "[worker]" in ln for ln in web_instructions)
    assert re.search(r"^FROM pytorch/pytorch:.*cuda", files["worker"], re.M)
    assert "[worker]" in files["worker"]


def test_images_install_the_wheel_and_copy_only_what_exists(compose):
    for name, text in _dockerfiles(compose).items():
        # Built into a wheel and installed from it (not the source tree, not editable).
        assert re.search(r"^RUN pip wheel .*--no-deps .*\.$", text, re.M), name
        assert re.search(r"^RUN pip install .*/wheels/ebc_judge-\*\.whl", text, re.M), name
        assert "pip install -e" not in text and "pip install ." not in text
        for line in text.splitlines():
            if line.startswith("COPY") and "--from=" not in line:
                *sources, _ = line.split()[1:]
                for source in sources:
                    assert (ROOT / source).exists(), f"{name}: COPY {source}: no such path"


def test_the_worker_image_has_a_torch_that_transformers_accepts(compose):
    # transformers 5 disables itself under torch < 2.6; the extra's floor says the same.
    text = _dockerfiles(compose)["worker"]
    images = re.findall(r"^FROM pytorch/pytorch:(\d+)\.(\d+)\.(\d+)-cuda[\d.]+-cudnn\d+-runtime",
                        text, re.M)  # fmt: skip
    assert images and len(set(images)) == 1, "one official runtime image, for both stages"
    base = tuple(int(v) for v in images[0])
    floor = re.search(r'"torch>=(\d+)\.(\d+)', (ROOT / "pyproject.toml").read_text())
    assert base >= (2, 6, 0) and base[:2] >= tuple(int(v) for v in floor.groups())
