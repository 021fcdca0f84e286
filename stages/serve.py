"""serve: a trained expr model behind the OpenAI chat completions API (not a stage)."""

from __future__ import annotations

import click

from arithrepro.stages.common import friendly_errors


@click.command("serve")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False),
              help="A trained expr model: runs/expr/<cell>/model.pt.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--key-env", default=None,
              help="An environment variable holding the key requests must carry (none: any).")
@friendly_errors
def serve(model_path: str, host: str, port: int, key_env: str | None) -> None:
    """Answer expr problems at http://HOST:PORT/v1/chat/completions as the llm stage asks them
    (its `local` endpoint, docs/bench.md): the last user message up to its `=`, the model's
    greedy answer as `{"answer": <integer>}`. Until interrupted."""
    from pathlib import Path

    from arithrepro.serve import server

    if not Path(model_path).is_file():
        raise FileNotFoundError(f"{model_path}: missing; train the cell first (dvc repro)")
    httpd = server(model_path, host, port, key_env)
    click.echo(f"serving {model_path} at http://{host}:{httpd.server_address[1]}/v1", err=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
