#!/bin/sh
# Sets the status of tools/table_fixtures/objects.yaml's objects (no controllers run in the
# test apiserver), then makes more.yaml's Job and PVC Terminating (a finalizer holds them).
#   K="kubectl --kubeconfig ~/real-apiserver/kubeconfig --context admin" sh status.sh
# more.yaml's first ControllerRevision names StatefulSet db's uid: substitute it before applying.
set -e
K="${K:-kubectl} -n kache-print-1"
P() { $K patch --subresource=status --type=merge "$@"; }
P service lb-ready -p '{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.5"},{"hostname":"lb.example.com"},{"ip":"203.0.113.1"},{"ip":"203.0.113.5"}]}}}'
P deployment web -p '{"status":{"replicas":3,"readyReplicas":2,"updatedReplicas":1,"availableReplicas":2}}'
P replicaset web-5d8f -p '{"status":{"replicas":3,"readyReplicas":1,"availableReplicas":1,"fullyLabeledReplicas":3}}'
P statefulset db -p '{"status":{"replicas":3,"readyReplicas":2,"currentReplicas":3}}'
P daemonset agent -p '{"status":{"desiredNumberScheduled":5,"currentNumberScheduled":4,"numberReady":3,"updatedNumberScheduled":2,"numberAvailable":1,"numberMisscheduled":0}}'
P job running -p '{"status":{"startTime":"2021-01-01T00:00:00Z","succeeded":1,"active":2}}'
P job queue -p '{"status":{"startTime":"2025-06-01T00:00:00Z","succeeded":2}}'
P job done -p '{"status":{"startTime":"2024-01-01T10:00:00Z","completionTime":"2024-01-01T10:03:25Z","succeeded":1,"conditions":[{"type":"SuccessCriteriaMet","status":"True","lastProbeTime":"2024-01-01T10:03:25Z","lastTransitionTime":"2024-01-01T10:03:25Z"},{"type":"Complete","status":"True","lastProbeTime":"2024-01-01T10:03:25Z","lastTransitionTime":"2024-01-01T10:03:25Z"}]}}'
P job paused -p '{"status":{"conditions":[{"type":"Suspended","status":"True","lastProbeTime":"2024-01-01T10:03:25Z","lastTransitionTime":"2024-01-01T10:03:25Z"}]}}'
P cronjob nightly -p '{"status":{"lastScheduleTime":"2020-06-01T03:00:00Z","active":[{"kind":"Job","name":"nightly-1","namespace":"kache-print-1"},{"kind":"Job","name":"nightly-2","namespace":"kache-print-1"}]}}'
P pvc bound -p '{"status":{"phase":"Bound","capacity":{"storage":"2Gi"},"accessModes":["ReadWriteMany","ReadOnlyMany"]}}'
P pv kache-print-pv1 -p '{"status":{"phase":"Released","reason":"ClaimGone"}}'
P pv kache-print-pv2 -p '{"status":{"phase":"Available"}}'
P rc legacy -p '{"status":{"replicas":2,"readyReplicas":1}}'
P ingress many-hosts -p '{"status":{"loadBalancer":{"ingress":[{"hostname":"zz.example.com"},{"ip":"198.51.100.7"}]}}}'
P pdb pct -p '{"status":{"disruptionsAllowed":2,"currentHealthy":4,"desiredHealthy":2,"expectedPods":4}}'
$K delete job doomed --wait=false
$K delete pvc doomed --wait=false
