"""When a freshness probe gets its bookmark: single watches with timeoutSeconds=3
from one below the current RV, started at random times; prints each one's start within its
wall-clock second and how long its bookmark took. Run with a writer moving the RV
(consistent_list.sh's).   python3 loadtest/real/probe_bookmark.py [count]"""
import http.client, json, time, random, sys
import realapi
tok=realapi.token()
ctx=realapi.tls()
def rv_now():
    c=http.client.HTTPSConnection('127.0.0.1',6443,context=ctx)
    c.request('GET','/api/v1/pods?limit=1',headers={'Authorization':'Bearer '+tok})
    r=json.loads(c.getresponse().read()); return int(r['metadata']['resourceVersion'])
def probe(res):
    c=http.client.HTTPSConnection('127.0.0.1',6443,context=ctx)
    R=rv_now()
    t0=time.time()
    c.request('GET','/api/v1/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion=%d'%(R-1),headers={'Authorization':'Bearer '+tok})
    r=c.getresponse()
    line=b''
    while not line.endswith(b'\n'):
        b=r.read(1)
        if not b: break
        line+=b
    if not line:
        res.append((t0%1, time.time()-t0, 'NONE', 0)); return
    t1=time.time()
    ev=json.loads(line)
    res.append((t0%1, t1-t0, ev['type'], int(ev['object']['metadata']['resourceVersion'])-R))
res=[]
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 15):
    time.sleep(random.uniform(0.3,1.7))
    probe(res)
for r in res: print('start frac %.3f  bookmark after %.3f s  %s  rv-R=%d'%r)
