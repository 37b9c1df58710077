"""The ``kvtiers`` console entry point: ``plan``, ``verify`` and ``bench``.

Each command prints Rich tables by default and JSON with ``--json``; the exit code is 0 only when what it
reports is good. Expected failures (bad config, unreachable server, failed checks) print a message, no traceback.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from kvtiers.cli import output
from kvtiers.config import ConfigError, load_environment

app = typer.Typer(
    name="kvtiers",
    help="Plan, verify and benchmark tiered KV-cache serving (vLLM + LMCache, L0 GPU / L1 DRAM / L2 Curvine).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_CONFIG = Path("config/dev.yaml")
ConfigOption = typer.Option(DEFAULT_CONFIG, "--config", "-c", help="Environment file.", show_default=True)
JsonOption = typer.Option(False, "--json", help="Print JSON on stdout instead of tables.")


def _load(config: Path):
    try:
        return load_environment(config)
    except ConfigError as exc:
        output.fail(str(exc))


@app.command()
def plan(
    config: Path = ConfigOption,
    hf_config: list[str] = typer.Option(
        [],
        "--hf-config",
        metavar="NAME=PATH",
        help="Size endpoint (or model id) NAME from a local Hugging Face config.json instead of the built-in "
        "table; repeatable.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Cache capacity per tier, and each HyperPod node's CPU, memory, GPUs, pods and disks asked against offered,
    from the environment file (no AWS calls). Exits 1 when pods do not fit their nodes."""
    from kvtiers.cli import plan as planner

    env = _load(config)
    try:
        overrides = [planner.parse_hf_override(v) for v in hf_config]
        env = planner.apply_hf_overrides(env, overrides, str(config))
    except ConfigError as exc:
        output.fail(str(exc))
    try:
        data = planner.plan_data(env)
    except ValueError as exc:
        output.fail(f"{config}: {exc}")
    if as_json:
        output.print_json(data)
    else:
        for t in planner.render(data):
            output.console.print(t)
        if not data["endpoints"]:
            output.console.print("[yellow]no serving endpoints configured[/yellow]")
        for endpoint in data["endpoints"]:
            if endpoint["layout_advice"]:
                advice = f"{endpoint['name']}: {endpoint['layout_advice']}"
                output.console.print(f"[yellow]layout:[/yellow] {escape(advice)}", soft_wrap=True)
        for warning in data["warnings"]:
            output.console.print(f"[yellow]placement:[/yellow] {escape(warning)}", soft_wrap=True)
        for problem in data["problems"]:
            output.err_console.print(f"[bold red]does not fit:[/bold red] {escape(problem)}", soft_wrap=True)
    if data["problems"]:
        raise typer.Exit(1)


@app.command()
def verify(
    config: Path = ConfigOption,
    kube_context: str | None = typer.Option(None, "--context", help="kubeconfig context. Default: current."),
    profile: str | None = typer.Option(None, "--profile", help="AWS profile. Default: the usual chain."),
    skip_cross_pod: bool = typer.Option(False, "--skip-cross-pod", help="Skip the cross-pod L2 hit check."),
    metrics_timeout: float = typer.Option(
        60.0, "--metrics-timeout", help="Seconds to wait for LMCache counters to move (they flush periodically)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Check a deployed environment: HyperPod, Curvine, L2 claim, endpoints, routers, cross-pod L2 hit."""
    from kvtiers.cli.verify import runner

    env = _load(config)
    try:
        clients = runner.real_clients(env, kube_context=kube_context, profile=profile)
    except runner.SetupError as exc:
        output.fail(str(exc))
    results = runner.run(
        env,
        clients,
        cross_pod=not skip_cross_pod,
        metrics_timeout=metrics_timeout,
        show_progress=not as_json,
    )
    ok = runner.report(results, as_json=as_json)
    raise typer.Exit(0 if ok else 1)


@app.command()
def top(
    url: str = typer.Option(
        ...,
        "--url",
        help="Prometheus-compatible base URL: the AMP workspace's query endpoint "
        "(stack output PrometheusEndpoint; signed with SigV4) or a port-forwarded Prometheus.",
    ),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="Environment file: lists its endpoints even before they have data."
    ),
    region: str | None = typer.Option(None, "--region", help="Sign for this region (default: from an AMP URL)."),
    profile: str | None = typer.Option(None, "--profile", help="AWS profile for signing. Default: the usual chain."),
    interval: float = typer.Option(5.0, "--interval", min=1.0, help="Seconds between refreshes."),
    once: bool = typer.Option(False, "--once", help="Print one snapshot and exit."),
    as_json: bool = JsonOption,
) -> None:
    """Per-endpoint prompt tokens by tier (L0, L1, L2, recomputed), TTFT and queue, and the shared L2, live."""
    import time

    from kvtiers.cli import top as topview

    names = [e.name for e in _load(config).serving.endpoints] if config else None
    client = topview.PrometheusClient(url, region=region, profile=profile)

    def take() -> topview.Snapshot:
        try:
            snap = topview.snapshot(client, names)
        except topview.TopError as exc:
            output.fail(str(exc))
        return snap

    if once or as_json:
        snap = take()
        if as_json:
            output.print_json(snap.as_dict())
        else:
            output.console.print(topview.render(snap))
        if snap.empty:
            output.err_console.print(
                "no kvtiers:* series yet: is observability.enabled on and the collector "
                "scraping? (rules record every 30 s)",
                highlight=False,
            )
            raise typer.Exit(1)
        return
    from rich.live import Live

    with Live(topview.render(take()), console=output.console, refresh_per_second=1) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(topview.render(take()))
        except KeyboardInterrupt:
            pass


def _lengths(value: str) -> list[int]:
    try:
        lengths = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{value!r}: give comma-separated token counts, e.g. 500,1000,2500") from None
    if not lengths or any(n < 1 for n in lengths):
        raise typer.BadParameter("every prompt length must be a positive integer")
    return lengths


@app.command()
def bench(
    url: str = typer.Option(..., "--url", help="Base URL of an OpenAI-compatible server (router or one replica)."),
    model: str = typer.Option(..., "--model", help="Model name the server serves."),
    warm_url: str | None = typer.Option(
        None, "--warm-url", help="Send warm requests to this other replica (isolates the cross-pod L2)."
    ),
    lengths: str = typer.Option("500,1000,2500,3000", "--lengths", help="Comma-separated prompt lengths in tokens."),
    repeats: int = typer.Option(3, "--repeats", min=1, max=50, help="Cold/warm pairs per length (median reported)."),
    turns: int = typer.Option(0, "--turns", min=0, max=20, help="Also replay a conversation of this many turns."),
    turn_tokens: int = typer.Option(1000, "--turn-context", min=1, help="Tokens of the first turn's context."),
    turn_extend: int = typer.Option(200, "--turn-extend", min=1, help="Tokens each new user turn adds."),
    max_tokens: int = typer.Option(8, "--max-tokens", min=1, help="Tokens generated per request."),
    timeout: float = typer.Option(120.0, "--timeout", min=0.1, help="Per-request timeout in seconds."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="Bearer token."),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="Environment file: with --endpoint, read the endpoint's API key from Secrets Manager.",
    ),
    endpoint: str | None = typer.Option(None, "--endpoint", help="The endpoint of --config whose API key to send."),
    profile: str | None = typer.Option(
        None, "--profile", help="AWS profile for Secrets Manager. Default: the usual chain."
    ),
    csv_path: Path | None = typer.Option(None, "--csv", help="Also write the rows as CSV to this file."),
    plot: Path | None = typer.Option(None, "--plot", help="Also plot TTFT vs prompt length to this PNG."),
    min_speedup: float | None = typer.Option(
        None, "--min-speedup", help="Exit 1 unless every length at or above --gate-tokens reaches this speedup."
    ),
    gate_tokens: int = typer.Option(1000, "--gate-tokens", help="Smallest prompt length --min-speedup applies to."),
    as_json: bool = JsonOption,
) -> None:
    """Cold vs warm time to first token per prompt length (streaming, persistent connections)."""
    from kvtiers.cli import bench as bm
    from kvtiers.cli.openai_client import BenchError, StreamingClient

    sizes = _lengths(lengths)
    if (config is None) != (endpoint is None):
        raise typer.BadParameter("give --config and --endpoint together (the endpoint whose API key to send)")
    if config is not None and endpoint is not None:
        from kvtiers.cli.api_key import ApiKeyError, endpoint_api_key

        if api_key:
            raise typer.BadParameter("give either --api-key or --config/--endpoint, not both")
        try:
            api_key = endpoint_api_key(_load(config), endpoint, profile=profile)
        except ApiKeyError as exc:
            output.fail(str(exc))
    if plot:
        try:
            bm.check_plotting()
        except BenchError as exc:
            output.fail(str(exc))
    cold = StreamingClient(url, model, timeout=timeout, max_tokens=max_tokens, api_key=api_key)
    warm = (
        StreamingClient(warm_url, model, timeout=timeout, max_tokens=max_tokens, api_key=api_key) if warm_url else cold
    )
    result = bm.BenchResult(cross_replica=warm is not cold)
    try:
        with output.progress(disable=as_json) as (advance, total):
            total(len(sizes) * repeats * 2 + turns * 2)
            cold.connect()
            if warm is not cold:
                warm.connect()
            result.rows = bm.run_lengths(cold, warm, sizes, repeats, progress=advance)
            if turns:
                result.turn_rows = bm.run_turns(cold, warm, turns, turn_tokens, turn_extend, progress=advance)
    except BenchError as exc:
        output.fail(str(exc), code=1)
    finally:
        cold.close()
        if warm is not cold:
            warm.close()
    rows = result.all_rows()
    if csv_path:
        bm.write_csv(csv_path, rows)
    if plot:
        bm.write_plot(plot, result.rows, f"TTFT vs prompt length ({model})")
    if as_json:
        output.print_json([r.as_dict() for r in rows])
    else:
        output.console.print(bm.render(result, url, warm_url))
        if result.turn_rows:
            output.console.print(bm.render_turns(result))
    if min_speedup is not None:
        low = [r for r in result.rows if r.prompt_tokens >= gate_tokens and r.speedup < min_speedup]
        if low:
            output.err_console.print(
                "speedup below --min-speedup " + ", ".join(f"{r.prompt_tokens} tokens: {r.speedup:.2f}x" for r in low),
                highlight=False,
            )
            raise typer.Exit(1)


@app.command()
def diff(
    base: str = typer.Option("main", "--base", help="Git revision to compare the working tree against."),
    config: list[Path] = typer.Option(
        [],
        "--config",
        "-c",
        help="Environment file of the repository, relative or absolute (repeatable). Default: every config/*.yaml of "
        "the working tree.",
    ),
    before: Path | None = typer.Option(None, "--before", help="A cdk.out folder: compare it with --after instead."),
    after: Path | None = typer.Option(None, "--after", help="The cdk.out folder deployed after --before."),
    output_file: Path | None = typer.Option(None, "--output", "-o", help="Also write the Markdown to this file."),
) -> None:
    """What deploying the change does: CloudFormation replacements, orphaned or lost Kubernetes objects, immutable
    fields, restarts, cache effects per endpoint, the HyperPod groups' nodes, the dependency chart and the pinned
    dependencies (the base is synthesized with its own: docs/change-model.md), as Markdown. Exit 1 on an error
    (orphan, lost object, immutable field, failing update, data-losing replacement); 2 when a synth is refused (pods
    that do not fit their nodes, a bad environment file: its lines are printed) or the diff cannot be made."""
    from kvtiers.change.manifests import AssemblyError
    from kvtiers.change.report import assembly_change, markdown
    from kvtiers.cli import diff as differ

    preface: list[str] = []
    compared_dependencies = True
    try:
        if (before is None) != (after is None):
            raise differ.DiffError("give both --before and --after, or neither")
        if before is not None and after is not None:
            for folder in (before, after):
                if not folder.is_dir():
                    raise differ.DiffError(f"{folder}: no such cdk.out folder")
            changes = [assembly_change(after.name, before, after)]
        else:
            repo = Path.cwd()
            configs = config or sorted(Path("config").glob("*.yaml"))
            if not configs:
                raise differ.DiffError("no environment files: give --config or run from the repository root")
            compared = differ.diff_revision(repo, base, configs)
            changes, preface = compared.changes, compared.dependency_lines()
            compared_dependencies = compared.compared
    except (differ.DiffError, AssemblyError) as exc:
        output.fail(str(exc))
    text = markdown(changes, preface=preface, dependencies_compared=compared_dependencies)
    if output_file is not None:
        output_file.write_text(text)
    output.console.print(text, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1 if any(c.errors for c in changes) else 0)


if __name__ == "__main__":
    app()
