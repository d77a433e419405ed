"""ragtrail's Python client: typed calls to the JSON API, and `cached_tool` for an agent's tools.

from ragtrail_client import RagtrailClient
client = RagtrailClient("http://127.0.0.1:8000", api_key="rt_...", scope="hospital")
answer = client.recall("What are the ICU visiting hours?")
"""

from ragtrail_client.aio import AsyncRagtrailClient
from ragtrail_client.client import (
    SIGNALS,
    RagtrailClient,
    RagtrailError,
    Recall,
    RecallFeedback,
    Recorded,
    SecondChance,
    SectionResult,
    Step,
    ToolLookup,
    ToolStored,
)
from ragtrail_client.tools import UncachedToolWarning, cached_tool

__all__ = [
    "SIGNALS",
    "AsyncRagtrailClient",
    "RagtrailClient",
    "RagtrailError",
    "Recall",
    "RecallFeedback",
    "Recorded",
    "SecondChance",
    "SectionResult",
    "Step",
    "ToolLookup",
    "ToolStored",
    "UncachedToolWarning",
    "cached_tool",
]
