// Applies config/istio's EnvoyFilter with Istio's own patch code (istio.io/istio
// pilot/pkg/networking/core/envoyfilter) to a gateway listener built from Istio's own filters (the
// InferencePool EPP ext_proc filter and the router, pilot/pkg/xds/filters) and to the coordinator's
// cluster, and prints the patched listener and cluster as JSON for test/deploy/istio-patch.test.ts.
//
//	epd-istio-patch <envoyfilter.yaml> > patched.json   (config/istio/install-tools.sh builds it)
package main

import (
	"encoding/json"
	"fmt"
	"os"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/core/envoyfilter"
	xdsfilters "istio.io/istio/pilot/pkg/xds/filters"
	"istio.io/istio/pkg/config/host"
	"istio.io/istio/pkg/config/xds"
	"istio.io/istio/pkg/wellknown"
	"sigs.k8s.io/yaml"

	// The typed-config types the patches name, registered for protojson's Any resolution.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

const coordinatorCluster = "outbound|50051||epd-coordinator.llm.svc.cluster.local"

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// mergedWrapper does what istiod's convertToEnvoyFilterWrapper does for one EnvoyFilter (unexported
// there): each patch value built with Istio's BuildXDSObjectFromStruct, grouped by applyTo, in order.
func mergedWrapper(ef *networking.EnvoyFilter) *model.MergedEnvoyFilterWrapper {
	out := &model.MergedEnvoyFilterWrapper{Patches: map[networking.EnvoyFilter_ApplyTo][]*model.EnvoyFilterConfigPatchWrapper{}}
	for _, cp := range ef.ConfigPatches {
		v, err := xds.BuildXDSObjectFromStruct(cp.ApplyTo, cp.Patch.Value, true)
		if err != nil {
			fail("patch %s: %v", cp.ApplyTo, err)
		}
		out.Patches[cp.ApplyTo] = append(out.Patches[cp.ApplyTo], &model.EnvoyFilterConfigPatchWrapper{
			Name: "epd-coordinator", Namespace: "llm", FullName: "llm/epd-coordinator",
			ApplyTo: cp.ApplyTo, Match: cp.Match, Operation: cp.Patch.Operation, Value: v,
		})
	}
	return out
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: istio-patch <envoyfilter.yaml>")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		fail("yaml: %v", err)
	}
	if err := json.Unmarshal(js, &obj); err != nil {
		fail("json: %v", err)
	}
	ef := &networking.EnvoyFilter{}
	if err := protojson.Unmarshal(obj.Spec, ef); err != nil {
		fail("EnvoyFilter spec: %v", err)
	}
	efw := mergedWrapper(ef)

	// A Gateway API gateway's HTTP listener as Istio builds it when the Gateway has an InferencePool:
	// the EPP's ext_proc filter, then the router.
	conn := &hcm.HttpConnectionManager{
		StatPrefix:     "outbound_0.0.0.0_80",
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "http.80"}},
		HttpFilters: []*hcm.HttpFilter{
			xdsfilters.InferencePoolExtProc,
			xdsfilters.BuildRouterFilter(xdsfilters.RouterFilterContext{}),
		},
	}
	connAny, _ := anypb.New(conn)
	lis := &listener.Listener{
		Name: "0.0.0.0_80",
		FilterChains: []*listener.FilterChain{{
			Filters: []*listener.Filter{{Name: wellknown.HTTPConnectionManager, ConfigType: &listener.Filter_TypedConfig{TypedConfig: connAny}}},
		}},
	}
	patched := envoyfilter.ApplyListenerPatches(networking.EnvoyFilter_GATEWAY, efw, []*listener.Listener{lis}, false)
	if len(patched) != 1 {
		fail("expected one listener after patching, got %d", len(patched))
	}
	cl := &cluster.Cluster{Name: coordinatorCluster, ConnectTimeout: nil}
	cl.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
	cl.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{ServiceName: coordinatorCluster, EdsConfig: &core.ConfigSource{}}
	cl = envoyfilter.ApplyClusterMerge(networking.EnvoyFilter_GATEWAY, efw, cl, []host.Name{"epd-coordinator.llm.svc.cluster.local"})

	m := protojson.MarshalOptions{UseProtoNames: true}
	lj, err := m.Marshal(patched[0])
	if err != nil {
		fail("marshal listener: %v", err)
	}
	cj, err := m.Marshal(cl)
	if err != nil {
		fail("marshal cluster: %v", err)
	}
	fmt.Printf("{\"listener\":%s,\"cluster\":%s}\n", lj, cj)
}
