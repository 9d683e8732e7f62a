"""A stand-in for an OpenAI-compatible streaming endpoint, for the tests
and for trying the gateway without a model:

    uvicorn fake_upstream:app --host 127.0.0.1 --port 9000

``POST /v1/chat/completions`` streams ``max_tokens`` (default 16) chunks of
one token each (4 characters), ``DELAY_MS`` apart (default 5), then a last
chunk with the ``usage`` block (prompt tokens counted as the gateway
estimates them: 4 characters a token) and ``[DONE]``.
"""

import asyncio
import json
import math
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

DELAY = int(os.environ.get("DELAY_MS", "5")) / 1000


async def completions(request: Request):
    body = await request.json()
    n = int(body.get("max_tokens", 16))
    prompt = "".join(str(m.get("content", "")) for m in body.get("messages", []))
    prompt_tokens = max(1, math.ceil(len(prompt) / 4))

    async def events():
        for i in range(n):
            chunk = {"id": "fake", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "tok "}}]}
            yield f"data: {json.dumps(chunk)}\n\n"
            await asyncio.sleep(DELAY)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        yield f"data: {json.dumps({'id': 'fake', 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
