"""kache's freshness proof emulated against the real apiserver: probes (watches from
the last proven RV with timeoutSeconds=3) start every second; readers at random times take the
upstream RV from a consistent `limit=1` LIST and wait for a probe's bookmark at least that new.
Prints the proof wait's median and mean. Run with a writer moving the RV (consistent_list.sh's).
  python3 loadtest/real/proof_emulation.py"""
import asyncio, aiohttp, json, time, random, statistics
import realapi
TOK=realapi.token()
CTX=realapi.tls()
B=realapi.MAIN
H={'Authorization':'Bearer '+TOK}
state={'rv':0}
cond=asyncio.Condition()
async def probe(s):
    frm=state['rv']
    try:
        await watch(s, frm)
    except aiohttp.ClientError:
        pass  # a probe cut short proves nothing; the next one will
async def watch(s, frm):
    async with s.get(f'{B}/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={frm}&timeoutSeconds=3',headers=H,ssl=CTX) as r:
        async for line in r.content:
            ev=json.loads(line)
            rv=int(ev['object']['metadata']['resourceVersion'])
            if rv>state['rv']:
                state['rv']=rv
                async with cond: cond.notify_all()
async def roll(s,end):
    while time.time()<end:
        asyncio.create_task(probe(s)); await asyncio.sleep(1.0)
async def reader(s,out):
    t0=time.time()
    async with s.get(f'{B}/api/v1/pods?limit=1',headers=H,ssl=CTX) as r:
        R=int((await r.json())['metadata']['resourceVersion'])
    t1=time.time()
    async with cond: await cond.wait_for(lambda: state['rv']>=R)
    out.append((t1-t0,time.time()-t0, t0%1))
async def main():
    async with aiohttp.ClientSession() as s:
        async with s.get(f'{B}/api/v1/pods?limit=1',headers=H,ssl=CTX) as r:
            state['rv']=int((await r.json())['metadata']['resourceVersion'])
        end=time.time()+40
        asyncio.create_task(roll(s,end))
        await asyncio.sleep(4)
        out=[]
        while time.time()<end-4:
            await asyncio.sleep(random.uniform(0.3,1.5)); await reader(s,out)
        print('n',len(out),'limit1 median %.3f'%statistics.median(x[0] for x in out),'proof median %.3f mean %.3f'%(statistics.median(x[1] for x in out),statistics.mean(x[1] for x in out)))
        print(' '.join('%.2f@%.2f'%(x[1],x[2]) for x in out))
asyncio.run(main())
