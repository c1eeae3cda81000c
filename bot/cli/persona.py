"""`companion persona …`: list, show and validate persona files, and import Character Cards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import click

from bot.cli.support import cli_settings, keep_backup
from knowledge.rules.decay import MemoryPolicy
from personas.card import persona_from_card, read_card
from personas.loader import (
    ID_RULE,
    PERSONA_DIR,
    PERSONA_SUFFIXES,
    Persona,
    PersonaError,
    PersonaRegistry,
    load_persona,
    persona_yaml,
)


@click.group()
def persona() -> None:
    """Persona files: list, show, validate, and import Character Cards (V2/V3, .json or .png)."""


def _registry(ctx: click.Context) -> PersonaRegistry:
    """The operator's persona directory first, then the bundled personas, as the running companion sees them."""
    return PersonaRegistry(cli_settings(ctx).own_persona_dir, PERSONA_DIR)


def checked_persona(path: Path) -> Persona:
    """Load a persona file and check what the loader alone cannot: its memory rules."""
    persona = load_persona(path)
    try:
        MemoryPolicy().overridden(persona.memory_rules)
    except (TypeError, ValueError) as error:
        raise PersonaError(f"{path.name}: memory_rules: {error}") from error
    return persona


def _checked_or_error(path: Path) -> Persona | PersonaError:
    """The persona of a file, checked, or what is wrong with it."""
    try:
        return checked_persona(path)
    except PersonaError as error:
        return error


def every_persona(registry: PersonaRegistry) -> Iterator[tuple[str, Path | None, Persona | PersonaError]]:
    """Each persona id present with its file, and the persona checked or what is wrong with it."""
    for persona_id in registry.ids():
        try:
            path = registry.path(persona_id)
        except PersonaError as error:  # two files define it
            yield persona_id, None, error
            continue
        if path is None:  # found by its file's name, which is no id
            yield persona_id, None, PersonaError(f"{persona_id}: a persona file is named by its id, {ID_RULE}")
        else:
            yield persona_id, path, _checked_or_error(path)


def _summary(persona: Persona) -> dict[str, object]:
    return {
        "id": persona.id,
        "name": persona.name,
        "language": persona.language,
        "greetings": len(persona.greetings),
        "system_memories": len(persona.system_memories),
        "lore_entries": len(persona.lorebook.entries) if persona.lorebook else 0,
    }


@persona.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def persona_list(ctx: click.Context, as_json: bool) -> None:
    """List the personas (yours, then the bundled ones), and any that are broken."""
    registry = _registry(ctx)
    rows: list[dict[str, object]] = []
    for persona_id, path, checked in every_persona(registry):
        file = str(path) if path else None
        if isinstance(checked, PersonaError):
            rows.append({"id": persona_id, "file": file, "error": str(checked)})
        else:
            rows.append({**_summary(checked), "file": file, "error": None})
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not rows:
        click.echo(f"No personas in {', '.join(map(str, registry.directories))}.")
    for row in rows:
        if row["error"]:
            click.echo(f"{row['id']:<20} BROKEN: {row['error']}")
        else:
            click.echo(
                f"{row['id']:<20} {row['name']} ({row['language']}): {row['greetings']} greetings, "
                f"{row['system_memories']} system memories, {row['lore_entries']} lore entries"
            )


@persona.command("show")
@click.argument("persona_id")
@click.option("--json", "as_json", is_flag=True, help="Print every field as JSON.")
@click.option("--prompt", "user_name", help="Print the character part of the chat prompt, as this user would get it.")
@click.pass_context
def persona_show(ctx: click.Context, persona_id: str, as_json: bool, user_name: str | None) -> None:
    """Show a persona: its file as loaded, or the prompt it makes (lore entries join it when their keys come up)."""
    try:
        persona = _registry(ctx).load(persona_id)
    except PersonaError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(persona.model_dump(mode="json"), ensure_ascii=False, indent=2))
    elif user_name is not None:
        from core.reply.prompt import persona_prompt  # the prompt builder (and its tokenizer) only when asked

        click.echo(persona_prompt(persona, user_name))
    else:
        click.echo(persona_yaml(persona), nl=False)


@persona.command("validate")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def persona_validate(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Check persona files (default: every persona's file); exits 1 if any is broken."""
    outcomes: list[tuple[Path | None, Persona | PersonaError]]
    if files:
        outcomes = [(path, _checked_or_error(path)) for path in files]
    else:
        outcomes = [(path, checked) for _, path, checked in every_persona(_registry(ctx))]
    broken = 0
    for path, checked in outcomes:
        if isinstance(checked, PersonaError):
            broken += 1
            click.echo(f"BROKEN  {checked}")
        else:
            click.echo(f"ok      {path.name if path else checked.id}")
    if broken:
        raise click.ClickException(f"{broken} of {len(outcomes)} persona files are broken")


@persona.command("import")
@click.argument("card_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--id", "persona_id", help="Persona id (default: made from the character's name or the file name).")
@click.option("--force", is_flag=True, help="Replace a persona with the same id (the old file is kept as .bak).")
@click.pass_context
def persona_import(ctx: click.Context, card_file: Path, persona_id: str | None, force: bool) -> None:
    """Import a Character Card V2 or V3 (.json, or .png with the card inside) as a persona file.

    It is written to COMPANION_PERSONA_DIR, or personas/ in the data directory; a bundled persona
    with the same id stays installed but is no longer used."""
    registry = _registry(ctx)
    directory = registry.directory
    try:
        persona = persona_from_card(read_card(card_file), persona_id, source=card_file.name)
    except PersonaError as error:
        raise click.ClickException(str(error)) from error
    target = directory / f"{persona.id}.yaml"
    existing = registry.files(persona.id)
    if existing and not force:
        raise click.ClickException(f"{existing[0]} exists; choose another --id, or --force to replace it")
    for replaced in PERSONA_SUFFIXES:  # a TOML file of the same id would leave two files defining it
        keep_backup(directory / f"{persona.id}{replaced}")
    directory.mkdir(parents=True, exist_ok=True)
    target.write_text(persona_yaml(persona), encoding="utf-8")
    summary = _summary(load_persona(target))
    click.echo(
        f"imported {persona.name} as {persona.id} ({target}): {summary['greetings']} greetings, "
        f"{summary['lore_entries']} lore entries"
    )
