"""Errors a user causes and can fix; their message names the fix (config key, file, command).

``benchmaker.logs`` shows these as a short block on the terminal (traceback in the rule's log only);
see ``logs.is_user_error`` for the other exception classes treated the same way.
"""

from __future__ import annotations

__all__ = ["UserError", "ConfigError", "KeyRejected", "NothingToDo", "key_rejected", "EXIT_OK", "EXIT_FAILURE",
           "EXIT_USAGE"]

# the exit status of a `benchmaker` command: success (also: nothing to do or list), a failure (invalid config,
# failed check, API or file error), a usage error (bad arguments, or a destructive action without --yes)
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UserError(Exception):
    """A problem with the user's input or environment; the message says how to fix it."""


class NothingToDo(UserError):
    """A stage's input is empty because everything upstream was lost (see ``losses.nothing_to_do``)."""


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key (raised by benchmaker.config and
    the sections' own checks, e.g. benchmaker.evaluate.systems)."""


class KeyRejected(UserError):
    """The API answered 401/403: the key is wrong, expired or lacks access. Retrying cannot help."""


def key_rejected(provider: str, status: int | str, detail: str) -> KeyRejected:
    env = "OPENAI_API_KEY" if provider == "openai" else "GEMINI_API_KEY (or GOOGLE_API_KEY)"
    return KeyRejected(
        f"the {provider} API rejected the API key (HTTP {status}: {detail.strip()[:200]}).\n"
        f"Check the key in the environment variable named by vision.{provider}.api_key_env / "
        f"judge.{provider}.api_key_env (default {env}), and base_url if you use another server; "
        "nothing was paid for the rejected requests. Rerun the same command once the key is fixed.")
