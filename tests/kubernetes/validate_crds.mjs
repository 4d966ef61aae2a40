// Validates custom resources (read as a JSON array on stdin) against the published schemas of
// their CRDs, offline: Gateway API, Istio networking, Prometheus Operator. Prints a JSON array
// of {kind, name, error} (error null when valid); an unknown kind is an error.
import { HTTPRoute } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute";
import { DestinationRule } from "@kubernetes-models/istio/networking.istio.io/v1/DestinationRule";
import { VirtualService } from "@kubernetes-models/istio/networking.istio.io/v1/VirtualService";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const models = {};
for (const model of [HTTPRoute, DestinationRule, VirtualService, ServiceMonitor]) {
  models[`${model.apiVersion}/${model.kind}`] = model;
}

let input = "";
for await (const chunk of process.stdin) input += chunk;
const results = JSON.parse(input).map((object) => {
  const name = object.metadata?.name ?? "";
  const Model = models[`${object.apiVersion}/${object.kind}`];
  if (!Model) return { kind: object.kind, name, error: `no schema for ${object.apiVersion} ${object.kind}` };
  try {
    new Model(object).validate();
    return { kind: object.kind, name, error: null };
  } catch (error) {
    return { kind: object.kind, name, error: String(error.message ?? error) };
  }
});
process.stdout.write(JSON.stringify(results));
