"""Guardrails: `Guardrail` (a named check, as data in `LoopSpec.guardrails`), `@guardrail`
(which binds a function to one, as `GuardrailFunction`) and `FinalAnswer` (what a final check
looks at). The loop asks with `CheckGuardrail` and takes `GuardrailChecked`."""

__all__ = ["FinalAnswer", "Guardrail", "GuardrailFunction", "guardrail"]

from ._commands import FinalAnswer as FinalAnswer
from ._guardrails import Guardrail as Guardrail
from ._guardrails import GuardrailFunction as GuardrailFunction
from ._guardrails import guardrail as guardrail
