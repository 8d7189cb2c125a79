#!/usr/bin/env python3
"""Which etcd revisions the watchable kinds account for (an idea for proofs): watch every
kind the real apiserver lists as watchable (../shared/real-apiserver, admin token in ~/real-apiserver)
from one RV for 35 s, then print how many revisions in that span were seen as an event of some kind
and which were not (writes to keys no client can watch, such as the endpoint reconciler's lease).
    python3 loadtest/real/rv_gaps.py
"""
import json, threading, time, urllib.request, sys
import realapi
T=realapi.token()
ctx=realapi.tls()
def get(p):
    return urllib.request.urlopen(urllib.request.Request(realapi.MAIN+p, headers={'Authorization':'Bearer '+T}), context=ctx, timeout=60)
start=int(json.load(get('/api/v1/namespaces?limit=1'))['metadata']['resourceVersion'])
# every listable+watchable resource from discovery
paths=[]
for gv in ['/api/v1']+['/apis/'+g['preferredVersion']['groupVersion'] for g in json.load(get('/apis'))['groups']] :
    for r in json.load(get(gv))['resources']:
        if '/' in r['name'] or 'watch' not in r.get('verbs',[]): continue
        paths.append(f"{gv}/{r['name']}")
seen={}
lock=threading.Lock()
def watch(p):
    try:
        resp=get(f"{p}?watch=1&resourceVersion={start}&timeoutSeconds=40&allowWatchBookmarks=false")
        for line in resp:
            ev=json.loads(line); rv=int(ev['object']['metadata'].get('resourceVersion','0'))
            with lock: seen[rv]=(p.split('/')[-1], ev['type'])
    except Exception as e: print('ERR',p,e,file=sys.stderr)
th=[threading.Thread(target=watch,args=(p,),daemon=True) for p in paths]
for t in th: t.start()
time.sleep(35)
end=int(json.load(get('/api/v1/namespaces?limit=1'))['metadata']['resourceVersion'])
time.sleep(3)
with lock:
    rvs=sorted(r for r in seen if start<r<=end)
    gaps=[r for r in range(start+1,end+1) if r not in seen]
print('watched',len(paths),'kinds; revisions',start,'->',end,':',end-start,'writes;',len(rvs),'seen as events;',len(gaps),'not seen:',gaps[:20])
from collections import Counter
print(Counter(seen[r][0] for r in rvs).most_common(8))
