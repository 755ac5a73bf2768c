"""`cosyvoice-studio serve`'s own checks: loopback by default, keys from a file, clear refusals."""

from __future__ import annotations

import argparse

import pytest

from studio.cli import main
from studio.commands.serve import is_loopback, read_key


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                                ("0.0.0.0", False), ("192.168.1.5", False), ("gpu-box", False)])  # fmt: skip
def test_only_loopback_hosts_count_as_private(host, loopback):
    assert is_loopback(host) is loopback


def test_the_key_comes_from_a_file_and_an_empty_file_is_refused(tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret\n")
    assert read_key(argparse.Namespace(api_key=None, api_key_file=str(keyfile))) == "s3cret"
    keyfile.write_text("\n")
    with pytest.raises(SystemExit, match="holds no key"):
        read_key(argparse.Namespace(api_key=None, api_key_file=str(keyfile)))


def test_a_missing_model_or_a_bad_replica_count_is_refused(tmp_path, capsys, tiny_model_dir):
    assert main(["serve", "--model", str(tmp_path / "none")]) == 2
    assert "model folder not found" in capsys.readouterr().err
    assert main(["serve", "--model", str(tiny_model_dir), "--ray", "--replicas", "many"]) == 2
    assert "--replicas" in capsys.readouterr().err


def test_voice_aliases_reach_the_service(tiny_model_dir, tmp_path):
    from studio.cli import build_parser
    from studio.commands.serve import build_service, voice_aliases

    aliases = ["--voice-alias", "Alloy=narrator", "--voice-alias", "nova=reader"]
    args = build_parser().parse_args(
        ["serve", "--model", str(tiny_model_dir), "--voices", str(tmp_path), *aliases]
    )
    service = build_service(args)
    assert service.voice_aliases == {"alloy": "narrator", "nova": "reader"}
    with pytest.raises(SystemExit, match="NAME=VOICE"):
        voice_aliases(["alloy"])
