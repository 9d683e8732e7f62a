"""A tiny Starlette app behind RatekeeperMiddleware.

    uvicorn app:app --host 127.0.0.1 --port 8000

Configured from the environment (RATEKEEPER_URL, RATEKEEPER_POLICY, ...;
see README.md). With FastAPI it is the same line:
``app.add_middleware(RatekeeperMiddleware)``.
"""

import logging

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratekeeper_middleware import RatekeeperMiddleware

# uvicorn configures only its own loggers; the middleware's lines (an
# outage, a refused token) must reach stderr too.
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
# httpx logs every request at INFO: one line per check.
logging.getLogger("httpx").setLevel(logging.WARNING)


async def hello(request):
    return PlainTextResponse("hello\n")


app = Starlette(routes=[Route("/", hello)], middleware=[Middleware(RatekeeperMiddleware)])
