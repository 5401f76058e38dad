"""An engine's own launch command (`engine.command`), read into the preset's flags as the engine's parser reads it.

A user has the command their deployment runs (`vllm serve Qwen/Qwen3-8B -tp 2 --max-num-seqs 256 --port 8000`); the
scenario may name it whole instead of restating its flags one by one. Each option is one of:

- **an option of a preset flag** (`Flag.option` and `Flag.aliases`, sim/config/engines/): its value becomes that
  flag's, checked and applied exactly as `engine.<flag>` is (a flag given both ways must agree); a flag that takes a
  list (argparse's nargs '+': SGLang's `--cuda-graph-bs 1 2 4`) takes the words up to the next option;
- **an option the preset accepts without effect** (`InertOption`, per engine beside its flags): the server's address
  and HTTP settings, where the model's files come from, logging, chat and tool-call parsing, the sampler's seed.
  None of these changes a number ServeSim computes; the run's notes list the ones given;
- anything else: refused in one line naming the option (never dropped: an option left out could change the engine).

Positional words (the program, `serve`, the model; `python -m <module>` before them) are not read: the scenario's
`model` is the one priced, and the note says so. The program names the engine (`CommandSyntax.programs`): it gives
`engine.name` where the scenario leaves it out, and one naming another engine is refused. How each engine's parser
spells options (`CommandSyntax`): vLLM's FlexibleArgumentParser takes underscores for dashes; argparse (vLLM,
SGLang, LMDeploy) takes an unambiguous prefix of a long option, here among the options the preset knows (the
engine's own parser sees all of its options, so a prefix this accepts may be ambiguous there); BooleanOptionalAction
(vLLM) turns a switch off as `--no-<option>`; click (TensorRT-LLM's trtllm-serve) takes exact spellings only.
`--option=value` and `--option value` are the same.
A switch may be followed by true or false (vLLM 0.6's `--enable-chunked-prefill True`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from sim.config.words import type_words
from sim.errors import ConfigError

PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
TRUE_WORDS = ("true", "True", "TRUE", "1")
FALSE_WORDS = ("false", "False", "FALSE", "0")


@dataclass(frozen=True)
class InertOption:
    """An engine option that changes nothing ServeSim computes, accepted in `engine.command` and noted."""

    option: str  # as the engine spells it, e.g. --port
    takes: str  # "none" (a switch), "one" value, "optional" (zero or one), "many" (one or more: nargs '+')
    about: str  # what it sets, in a few words: the note groups the given options by it
    since: tuple[int, ...] | str | None = None  # the first version whose parser has it ("0.4.3.post3"; None: all)
    until: tuple[int, ...] | str | None = None  # the first version whose parser refuses it (None: none known)


@dataclass(frozen=True)
class CommandSyntax:
    """How an engine's command-line parser reads options."""

    underscores: bool = False  # --max_model_len is --max-model-len (vLLM's FlexibleArgumentParser)
    prefixes: bool = False  # an unambiguous prefix of a long option (argparse's allow_abbrev)
    negation: bool = False  # --no-<switch> turns it off (argparse's BooleanOptionalAction)
    attached: tuple[str, ...] = ()  # short options whose value may be written on them: -O3, -O=3 (vLLM's -O)
    # the executables and Python packages that start the engine's server (`vllm serve`, `trtllm-serve`,
    # `python -m sglang.launch_server`): a command starting with one names its engine (`command_program`)
    programs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandFlags:
    """What a command gave: the preset flags' values (by flag name), the options accepted without effect (as
    written), and the positional words not read."""

    flags: dict[str, Any]
    written: dict[str, str]  # each flag's option and value as the command wrote them ('-tp 2')
    inert: list[tuple[str, InertOption]]  # (the option with its values as written, the option)
    not_read: list[str]


def command_program(text: Any) -> tuple[str, str] | None:
    """(the words that start a launch command's program as written, the program's name or the top package of the
    module `python -m` runs): ('vllm', 'vllm'), ('python3 -m sglang.launch_server', 'sglang'); None where the command
    does not split into words (read_command says so) or starts with neither."""
    try:
        words = shlex.split(text) if isinstance(text, str) else []
    except ValueError:
        return None
    if len(words) >= 3 and PYTHON.fullmatch(words[0].rsplit("/", 1)[-1]) and words[1] == "-m":
        return " ".join(words[:3]), words[2].split(".")[0]
    if words and not words[0].startswith("-"):
        return words[0], words[0].rsplit("/", 1)[-1]
    return None


def option_value(text: str, kind, shown: str | None = None) -> Any:
    """A command-line word as a flag of `kind` takes it (an int, a float, a word, a switch's true/false); refused in
    one line naming `shown` (the option as written; default: the word) otherwise."""
    shown = text if shown is None else shown
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if bool in kinds:
        if text in TRUE_WORDS or text in FALSE_WORDS:
            return text in TRUE_WORDS
    else:
        for number in (int, float):
            if number in kinds:
                try:
                    return number(text)
                except ValueError:
                    pass
        if str in kinds:
            return text
    raise ConfigError(f"engine.command: {shown!r} is not allowed; allowed: {type_words(kinds)}")


def read_command(text: Any, engine: str, options: dict[str, tuple[str, Any]], inert: dict[str, InertOption],
                 syntax: CommandSyntax) -> CommandFlags:
    """`text`, an engine's launch command, as its preset's flags. `options`: each spelling of a preset flag's
    option -> (the flag's name, its kind); `inert`: the options accepted without effect, by spelling. Refused in one
    line: a command that is not a string or does not split into words, an option the preset neither reads nor
    accepts, an ambiguous prefix, a value missing or of the wrong kind."""
    if not isinstance(text, str):
        raise ConfigError(f"engine.command: {text!r} is not allowed; allowed: the {engine} launch command as one "
                          "string, as a shell would take it")
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise ConfigError(f"engine.command: {text!r} does not split into words ({err}); allowed: a command line "
                          "with balanced quotes") from None
    flags: dict[str, Any] = {}
    written: dict[str, str] = {}
    given_inert: list[tuple[str, InertOption]] = []
    not_read: list[str] = []
    i = 0
    if len(words) >= 3 and PYTHON.fullmatch(words[0].rsplit("/", 1)[-1]) and words[1] == "-m":
        not_read, i = words[:3], 3  # python -m sglang.launch_server: the interpreter's options are not the engine's
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            not_read.append(word)
            continue
        spelled, _, attached = word.partition("=")
        has_attached = "=" in word
        short = next((short for short in syntax.attached if word.startswith(short) and len(word) > len(short)
                      and word[len(short)] not in ".="), None)
        if short is not None:  # -O3: the value written on the option
            spelled, attached, has_attached = short, word[len(short):], True
        spelled, negated = resolve_option(spelled, options, inert, syntax)
        if spelled in options:
            name, kind = options[spelled]
            kinds = kind if isinstance(kind, tuple) else (kind,)
            shown = word
            if list in kinds:  # nargs '+': the words up to the next option, each an integer
                parts = [attached] if has_attached else []
                while i < len(words) and not words[i].startswith("-"):
                    parts.append(words[i])
                    i += 1
                if not parts:
                    raise ConfigError(f"engine.command: {word!r} needs a value; allowed: {word} <integer> ...")
                shown = " ".join([word, *(parts[1:] if has_attached else parts)])  # (word holds an attached one)
                value = [option_value(part, int, shown) for part in parts]
            elif bool in kinds:
                if negated or has_attached:
                    value = (not negated) if not has_attached else option_value(attached, bool, word)
                elif i < len(words) and (words[i] in TRUE_WORDS or words[i] in FALSE_WORDS):
                    value = words[i] in TRUE_WORDS  # vLLM 0.6's --enable-chunked-prefill True
                    shown = f"{word} {words[i]}"
                    i += 1
                else:
                    value = True
            else:
                if not has_attached:
                    if i >= len(words):
                        raise ConfigError(f"engine.command: {word!r} needs a value; allowed: {word} "
                                          f"<{type_words(kinds)}>")
                    attached = words[i]
                    i += 1
                    shown = f"{word} {attached}"
                value = option_value(attached, kind, shown)
            flags[name], written[name] = value, shown
            continue
        if spelled in inert:
            option = inert[spelled]
            parts = [word]
            if not has_attached and option.takes in ("one", "many"):
                if i >= len(words):
                    raise ConfigError(f"engine.command: {word!r} needs a value; allowed: {word} <value>")
                parts.append(words[i])
                i += 1
                while option.takes == "many" and i < len(words) and not words[i].startswith("-"):
                    parts.append(words[i])
                    i += 1
            elif not has_attached and option.takes == "optional" and i < len(words) and not words[i].startswith("-"):
                parts.append(words[i])
                i += 1
            given_inert.append((" ".join(parts), option))
            continue
        raise ConfigError(f"engine.command: {word!r} is not an option the {engine} preset reads; allowed: "
                          f"{', '.join(sorted(options))}, or one it accepts without effect: "
                          f"{', '.join(sorted(inert))}")
    return CommandFlags(flags, written, given_inert, not_read)


def resolve_option(spelled: str, options: dict[str, tuple[str, Any]], inert: dict[str, InertOption],
                   syntax: CommandSyntax) -> tuple[str | None, bool]:
    """(the full spelling, among `options` and `inert`, of an option as written without its `=value`, or None where
    it is neither; whether it was written `--no-<switch>`). An ambiguous prefix is refused in one line."""
    written = spelled
    if syntax.underscores and spelled.startswith("--"):
        spelled = "--" + spelled[2:].replace("_", "-")
    if spelled in options or spelled in inert:
        return spelled, False
    if syntax.negation and spelled.startswith("--no-") and _is_switch("--" + spelled[5:], options, inert):
        return "--" + spelled[5:], True
    if syntax.prefixes and spelled.startswith("--"):
        matches = sorted(option for option in set(options) | set(inert) if option.startswith(spelled))
        if len(matches) > 1:
            raise ConfigError(f"engine.command: {written!r} is ambiguous ({', '.join(matches)}); allowed: one of "
                              "them in full")
        if matches:
            return matches[0], False
    return None, False


def _is_switch(option: str, options: dict[str, tuple[str, Any]], inert: dict[str, InertOption]) -> bool:
    if option in options:
        kind = options[option][1]
        return bool in (kind if isinstance(kind, tuple) else (kind,))
    return option in inert and inert[option].takes == "none"


def as_command_error(err: ConfigError, read: CommandFlags, given_apart: set[str]) -> ConfigError:
    """An error about a flag the command gave (`engine.<flag>: ...`, from the checks every flag goes through, or
    `engine.<flag>.<key>: ...` about a key of its JSON value) as one about the option the user wrote: `engine.command
    '-tp 2': ...`, `engine.command '-cc {...}': <key>: ...`; other errors as they are."""
    text = str(err)
    for name, shown in read.written.items():
        if name in given_apart:
            continue
        prefix = f"engine.{name}:"
        if text.startswith(prefix):
            return ConfigError(f"engine.command {shown!r}:{text[len(prefix):]}")
        if text.startswith(f"engine.{name}."):
            return ConfigError(f"engine.command {shown!r}: {text[len(f'engine.{name}.'):]}")
    return err


# The options that name the model served (vLLM's --model, SGLang's --model-path and its alias --model) and the
# subcommands between a program and its model (`vllm serve M`, `trtllm-serve serve M`, `lmdeploy serve api_server M`)
MODEL_OPTIONS = ("--model", "--model-path")
SUBCOMMANDS = ("serve", "api_server")


def served_model(text: str, read: CommandFlags) -> str | None:
    """The model a launch command serves as written (`Qwen/Qwen3-8B`, a local path), read from its model option or
    else its first positional word after the program and its subcommands; None where it names none."""
    for written, option in read.inert:
        if option.option in MODEL_OPTIONS:
            first, _, rest = written.partition(" ")
            return rest if rest else first.partition("=")[2]
    program = command_program(text)
    words = read.not_read[len(program[0].split()) if program is not None else 0:]
    return next((word for word in words if word not in SUBCOMMANDS), None)


def command_notes(read: CommandFlags) -> list[str]:
    """The run's notes on what a command gave that changes nothing simulated, one line each."""
    notes = []
    if read.inert:
        abouts = list(dict.fromkeys(option.about for _, option in read.inert))
        notes.append(f"engine.command: {', '.join(shown for shown, _ in read.inert)}: accepted, no effect on what "
                     f"is simulated ({'; '.join(abouts)})")
    if read.not_read:
        notes.append(f"engine.command: {' '.join(read.not_read)!r} not read as options (the program, read for the "
                     "engine it starts, and the model, the scenario's where it names none: the scenario's model is "
                     "the one priced)")
    return notes
