#!/usr/bin/env python3
"""A TCP balancer: several servers behind one address, as replicas behind a Service.

Each accepted connection goes to the next backend in rotation that is in service, or to the
one after it when the connect fails (a replica stopped, its listener closed); its bytes are
relayed both ways until either side closes, which closes the other. A backend is out of
service while the file CTL_DIR/out.PORT exists (as a Service's endpoints drop a pod that is
terminating or not ready). CTL_DIR/listening is created once it listens. One line per relayed
connection goes to standard output: `PORT` of the backend it went to.

  python3 loadtest/real/balancer.py LISTEN_PORT CTL_DIR BACKEND_PORT...
"""
import asyncio
import os
import sys

LISTEN, CTL, BACKENDS = int(sys.argv[1]), sys.argv[2], [int(p) for p in sys.argv[3:]]
turn = 0


async def pipe(reader, writer):
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def relay(client_r, client_w):
    global turn
    first, turn = turn, turn + 1
    for k in range(len(BACKENDS)):
        port = BACKENDS[(first + k) % len(BACKENDS)]
        if os.path.exists(f"{CTL}/out.{port}"):
            continue
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            continue
        print(port, flush=True)
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))
        return
    client_w.close()


async def main():
    server = await asyncio.start_server(relay, "127.0.0.1", LISTEN)
    open(f"{CTL}/listening", "w").close()
    async with server:
        await server.serve_forever()


asyncio.run(main())
