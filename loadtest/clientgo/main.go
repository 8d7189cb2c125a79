// informer-sync: how long a client-go shared informer of pods takes to sync against one
// server (kache or the apiserver), and a digest of its store to compare the two.
//
// client-go 1.35+ lists with WatchList (a watch with sendInitialEvents=true) by default;
// -watchlist=false falls back to LIST+WATCH. With -follow D it keeps the informer running for
// D after the sync, counting the events its handler receives (adds, updates, deletes), and
// then prints them with the store's digest: an upstream restart that makes the client relist
// shows as an update for every object. -digest-at F waits until the file F exists before
// taking the final digest (a driver script creates it once writes have stopped).
// -cpuprofile F and -blockprofile F write Go profiles of the sync (read with go tool pprof),
// which show where the client spends a sync's time. Built inside the Kubernetes tree that
// ../../shared/real-apiserver/build.sh extracts (its vendored client-go), by build.sh here.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver")
	kctx := flag.String("context", "", "context in the kubeconfig")
	server := flag.String("server", "", "override the server (kache's address)")
	watchList := flag.Bool("watchlist", true, "use WatchList (client-go's default)")
	protobuf := flag.Bool("protobuf", false, "ask for protobuf explicitly, as kube-controller-manager and kube-scheduler do (without it, client-go 1.36's typed clients still prefer protobuf for built-in kinds: Request.UseProtobufAsDefaultIfPreferred)")
	fieldSelector := flag.String("field-selector", "", "list and watch only the pods this field selector picks (a kubelet's: spec.nodeName=NODE)")
	follow := flag.Duration("follow", 0, "keep watching this long after the sync, counting events")
	digestAt := flag.String("digest-at", "", "with -follow: take the final digest once this file exists (at most the -follow time)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the sync (until the informer has synced) to this file")
	blockProfile := flag.String("blockprofile", "", "write a profile of where goroutines blocked during the sync to this file")
	flag.Parse()
	if *blockProfile != "" {
		runtime.SetBlockProfileRate(1)
	}
	if !*watchList {
		os.Setenv("KUBE_FEATURE_WatchListClient", "false")
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: *kubeconfig}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: *kctx}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		panic(err)
	}
	if *server != "" {
		cfg.Host = *server
		cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: cfg.Host[:5] == "https"}
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	if *protobuf {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = *fieldSelector
	}))
	inf := factory.Core().V1().Pods().Informer()
	var synced atomic.Bool
	var adds, updates, deletes, sameRV atomic.Int64
	// The handler's own registration says when it has been given every object of the
	// initial list (the informer's HasSynced only says the store has them: the handler may
	// still be working through their adds, which must not count as events after the sync).
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(interface{}) {
			if synced.Load() {
				adds.Add(1)
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			updates.Add(1)
			if old.(*corev1.Pod).ResourceVersion == cur.(*corev1.Pod).ResourceVersion {
				sameRV.Add(1)
			}
		},
		DeleteFunc: func(interface{}) { deletes.Add(1) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+*follow)
	defer cancel()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
	}
	start := time.Now()
	factory.Start(ctx.Done())
	// Polled every millisecond: cache.WaitForCacheSync polls every 100 ms, which would
	// round every sync time up to the next tenth of a second.
	bothSynced := func(context.Context) (bool, error) { return inf.HasSynced() && reg.HasSynced(), nil }
	if err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, bothSynced); err != nil {
		fmt.Fprintln(os.Stderr, "did not sync")
		os.Exit(1)
	}
	took := time.Since(start)
	pprof.StopCPUProfile()
	if *blockProfile != "" {
		f, err := os.Create(*blockProfile)
		if err != nil {
			panic(err)
		}
		if err := pprof.Lookup("block").WriteTo(f, 0); err != nil {
			panic(err)
		}
		f.Close()
	}
	synced.Store(true)
	if *follow > 0 {
		fmt.Printf("synced %d pods in %.2f s watchlist=%v; following for %v\n", len(inf.GetStore().List()), took.Seconds(), *watchList, *follow)
		end := time.Now().Add(*follow)
		for time.Now().Before(end) {
			if *digestAt != "" {
				if _, err := os.Stat(*digestAt); err == nil {
					time.Sleep(5 * time.Second) // the last writes' events arrive
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		fmt.Printf("events after sync: adds=%d updates=%d (same RV: %d) deletes=%d\n", adds.Load(), updates.Load(), sameRV.Load(), deletes.Load())
	}
	keys := []string{}
	for _, o := range inf.GetStore().List() {
		p := o.(*corev1.Pod)
		keys = append(keys, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k + "\n"))
	}
	fmt.Printf("synced %d pods in %.2f s watchlist=%v protobuf=%v digest=%x\n", len(keys), took.Seconds(), *watchList, *protobuf, h.Sum(nil)[:8])
}
