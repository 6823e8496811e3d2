"""The conversation: messages, their parts, a model's reply, and checks on a history.

Every provider's wire format maps onto these frozen structs and back; `History` is a read-only
view of a ledger's messages, and `validate_history` / `history_problems` say whether a list of
messages is one a model accepts (every call answered, in order).
"""

__all__ = [
    "AssistantMessage",
    "Audio",
    "Document",
    "History",
    "HistoryProblem",
    "Image",
    "Instructions",
    "Message",
    "ModelResponse",
    "ModelStop",
    "Opaque",
    "Part",
    "ResultPart",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "Usage",
    "UserMessage",
    "UserPart",
    "estimate_tokens",
    "history_problems",
    "text_of",
    "validate_history",
]

from ._errors import HistoryProblem as HistoryProblem
from ._guards import estimate_tokens as estimate_tokens
from ._history import History as History
from ._history import history_problems as history_problems
from ._history import validate_history as validate_history
from ._messages import AssistantMessage as AssistantMessage
from ._messages import Audio as Audio
from ._messages import Document as Document
from ._messages import Image as Image
from ._messages import Instructions as Instructions
from ._messages import Message as Message
from ._messages import ModelResponse as ModelResponse
from ._messages import ModelStop as ModelStop
from ._messages import Opaque as Opaque
from ._messages import Part as Part
from ._messages import ResultPart as ResultPart
from ._messages import Text as Text
from ._messages import Thinking as Thinking
from ._messages import ToolCall as ToolCall
from ._messages import ToolResult as ToolResult
from ._messages import ToolResults as ToolResults
from ._messages import Usage as Usage
from ._messages import UserMessage as UserMessage
from ._messages import UserPart as UserPart
from ._messages import text_of as text_of
