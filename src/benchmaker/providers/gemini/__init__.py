"""Gemini specifics (Google GenAI SDK, ``google-genai``), on top of the shared provider layer.

What is shared with OpenAI and used unchanged: :class:`~benchmaker.providers.spec.RequestSpec` (the
same prompts, ``{metadata.<col>}`` placeholders and JSON schemas), image reading / downscaling
(:func:`~benchmaker.providers.spec.encode_image`), the response cache, answer validation
(:func:`~benchmaker.providers.parse.validate_answer` + the adapter's check), the attempt loop and
losses of :class:`~benchmaker.providers.engine.Runner`, the bounded-concurrency pool and back-off of
:class:`~benchmaker.providers.transport.SyncTransport`, cost rows
(:func:`~benchmaker.providers.cost.cost_row`), and the chunking of
:mod:`~benchmaker.providers.batch`.

What is Gemini's own, here:

* the client: ``genai.Client`` with the key from ``GEMINI_API_KEY`` (then ``GOOGLE_API_KEY``) unless
  ``api_key_env`` names another variable; the SDK's own retries are off (we retry, and count);
* the request: ``contents`` + ``GenerateContentConfig`` (system instruction, ``response_json_schema``
  = the same JSON schema, thinking from ``reasoning_effort``, media resolution from ``image_detail``);
  images inline (downscaled JPEG/PNG bytes) or, with ``image_transport: url``, as ``file_data`` URIs;
* the answer: ``candidates[0]``; ``finishReason`` other than ``STOP`` (``MAX_TOKENS``, ``SAFETY``,
  ``RECITATION``, …) is ``incomplete``; a blocked prompt is ``refusal``;
* usage (``usageMetadata``) and the Gemini price table (long-context tier of the Pro models);
* rate limits: ``429 RESOURCE_EXHAUSTED`` waits ``Retry-After`` or the ``RetryInfo.retryDelay`` of the
  error, else exponential back-off; 408 / 5xx / network errors back off too;
* batch mode (:meth:`GeminiRunner.run_batch`): inline-request batch jobs, with a per-chunk state file
  written before and after every create call, so an interrupted run resumes without resubmitting.
"""

from .client import (
                     DEFAULT_MODEL,
                     GEMINI_PRICES,
                     KEY_ENVS,
                     LONG_CONTEXT_PRICES,
                     TERMINAL_STATES,
                     MissingKey,
                     api_key,
                     gemini_price,
                     gemini_settings,
                     key_env_names,
                     make_client,
                     split_base_url,
)
from .runner import GeminiRunner, GeminiTransport
from .wire import (
                     gemini_request_key,
                     media_resolution,
                     parse_response,
                     render_request,
                     request_to_sdk,
                     response_dict,
                     thinking_config,
                     to_openapi_schema,
                     usage_from_response,
                     uses_json_schema,
)

__all__ = ["GEMINI_PRICES", "LONG_CONTEXT_PRICES", "DEFAULT_MODEL", "KEY_ENVS", "gemini_price", "api_key",
           "make_client", "split_base_url", "gemini_settings", "key_env_names", "uses_json_schema",
           "to_openapi_schema", "thinking_config", "media_resolution", "render_request", "request_to_sdk",
           "gemini_request_key", "usage_from_response", "parse_response", "response_dict", "GeminiTransport",
           "GeminiRunner", "TERMINAL_STATES", "MissingKey"]
