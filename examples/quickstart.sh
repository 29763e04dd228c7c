#!/usr/bin/env bash
# The quickstart in one command, from the repository root:
#
#   examples/quickstart.sh
#
# 1. creates a kind cluster from kind-config.yaml (one control plane, two workers) with a local
#    image registry (the `kind-registry` container on localhost:5001);
# 2. builds the operator and runner images with docker, pushes them to that registry and loads
#    them into the nodes (`kind load docker-image`);
# 3. installs the Helm chart with charts/rollout-operator/values-quickstart.yaml (MinIO on) and
#    waits for the operator;
# 4. port-forwards MinIO, publishes the example dataset (`rollout publish examples/tasks`) and
#    runs the example job (`rollout run examples/job.yaml`: the oracle agent on the offline hello
#    task) with the `rollout` CLI;
# 5. prints where the results are.
#
# Needs docker, kind, kubectl, helm, curl and the `rollout` CLI (`pip install .` in this
# repository). Running it again reuses the cluster, the registry and the release.
#
# Settings (environment variables): CLUSTER (default rollout), NAMESPACE (rollout-system),
# RELEASE (rollout-operator), TAG (dev), REGISTRY_PORT (5001), MINIO_PORT (9000),
# SKIP_BUILD=1 to reuse images already built, BUILDER_IMAGE (the image builder the operator runs;
# its default is the operator's own, rollout.controller.builds.DEFAULT_BUILDER_IMAGES).
set -euo pipefail

CLUSTER=${CLUSTER:-rollout}
NAMESPACE=${NAMESPACE:-rollout-system}
RELEASE=${RELEASE:-rollout-operator}
TAG=${TAG:-dev}
REGISTRY_NAME=kind-registry
REGISTRY_PORT=${REGISTRY_PORT:-5001}
MINIO_PORT=${MINIO_PORT:-9000}
REGISTRY=localhost:${REGISTRY_PORT}
OPERATOR_IMAGE=${REGISTRY}/rollout-operator:${TAG}
RUNNER_IMAGE=${REGISTRY}/rollout-runner:${TAG}
# The images built here, whatever REGISTRY_PORT and TAG are.
IMAGE_VALUES=(
  --set "image.repository=${REGISTRY}/rollout-operator" --set "image.tag=${TAG}"
  --set "runner.image.repository=${REGISTRY}/rollout-runner" --set "runner.image.tag=${TAG}"
)
TASK_IMAGE=debian:bookworm-slim # examples/tasks/hello-offline/task.toml docker_image
BUILDER_IMAGE=${BUILDER_IMAGE:-moby/buildkit:v0.23.2-rootless}
CHART=charts/rollout-operator
# The chart names its objects "<release>-rollout-operator", or just the release name when that
# already contains "rollout-operator".
case "${RELEASE}" in *rollout-operator*) FULLNAME=${RELEASE} ;; *) FULLNAME=${RELEASE}-rollout-operator ;; esac
VALUES=${CHART}/values-quickstart.yaml

cd "$(dirname "$0")/.."

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

# Every prerequisite first, all that are missing listed at once, each with what it is for.
missing=()
need() { # tool, what it is for
  command -v "$1" >/dev/null 2>&1 || missing+=("$1: $2")
}
need docker "builds the images and runs the kind cluster's nodes (https://docs.docker.com/get-docker/)"
need kind "creates the local Kubernetes cluster (https://kind.sigs.k8s.io/docs/user/quick-start/)"
need kubectl "talks to the cluster (https://kubernetes.io/docs/tasks/tools/)"
need helm "installs the operator's chart (https://helm.sh/docs/intro/install/)"
need curl "waits for MinIO to answer"
need rollout "the CLI that publishes and runs the job: pip install . in this repository"
if command -v docker >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
  missing+=("a running docker: 'docker info' fails (start the docker daemon, or let this user use it)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf 'quickstart: cannot start; missing:\n' >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi

# --- 1. the registry and the cluster ---------------------------------------------------------
say "local registry ${REGISTRY_NAME} on ${REGISTRY}"
if [ "$(docker inspect -f '{{.State.Running}}' "${REGISTRY_NAME}" 2>/dev/null || true)" != "true" ]; then
  docker rm -f "${REGISTRY_NAME}" >/dev/null 2>&1 || true
  docker run -d --restart=always -p "127.0.0.1:${REGISTRY_PORT}:5000" --network bridge \
    --name "${REGISTRY_NAME}" registry:2 >/dev/null
fi

say "kind cluster ${CLUSTER}"
if ! kind get clusters 2>/dev/null | grep -qx "${CLUSTER}"; then
  kind create cluster --name "${CLUSTER}" --config kind-config.yaml --wait 120s
fi
kubectl config use-context "kind-${CLUSTER}" >/dev/null

# Every node resolves localhost:${REGISTRY_PORT} to the registry container (kind-config.yaml
# points containerd at /etc/containerd/certs.d).
for node in $(kind get nodes --name "${CLUSTER}"); do
  docker exec "${node}" mkdir -p "/etc/containerd/certs.d/${REGISTRY}"
  printf '[host."http://%s:5000"]\n' "${REGISTRY_NAME}" |
    docker exec -i "${node}" cp /dev/stdin "/etc/containerd/certs.d/${REGISTRY}/hosts.toml"
done
if [ "$(docker inspect -f '{{json .NetworkSettings.Networks.kind}}' "${REGISTRY_NAME}")" = "null" ]; then
  docker network connect kind "${REGISTRY_NAME}"
fi
# Tell tools where the local registry is (KEP-1755).
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-registry-hosting
  namespace: kube-public
data:
  localRegistryHosting.v1: |
    host: "${REGISTRY}"
    help: "https://kind.sigs.k8s.io/docs/user/local-registry/"
EOF

# --- 2. images -------------------------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != "1" ]; then
  say "building ${OPERATOR_IMAGE} and ${RUNNER_IMAGE}"
  docker build -f operator/Dockerfile -t "${OPERATOR_IMAGE}" .
  docker build -f runner-image/Dockerfile -t "${RUNNER_IMAGE}" .
  docker push "${OPERATOR_IMAGE}" >/dev/null
  docker push "${RUNNER_IMAGE}" >/dev/null
fi
say "loading images into the nodes"
kind load docker-image --name "${CLUSTER}" "${OPERATOR_IMAGE}" "${RUNNER_IMAGE}"
# The task's image, the image builder's and the chart's third-party images (MinIO, mc), so that
# the nodes need not pull them (every pull policy is IfNotPresent).
chart_images=$(helm template "${RELEASE}" "${CHART}" -f "${VALUES}" "${IMAGE_VALUES[@]}" |
  sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' | { grep -v "^${REGISTRY}/" || true; } | sort -u)
for image in "${TASK_IMAGE}" "${BUILDER_IMAGE}" ${chart_images}; do
  if docker image inspect "${image}" >/dev/null 2>&1 || docker pull -q "${image}" >/dev/null; then
    kind load docker-image --name "${CLUSTER}" "${image}" || true
  else
    echo "could not pull ${image}; the nodes will pull it themselves"
  fi
done

# --- 3. the chart ----------------------------------------------------------------------------
say "installing the chart (release ${RELEASE}, namespace ${NAMESPACE})"
helm upgrade --install "${RELEASE}" "${CHART}" --namespace "${NAMESPACE}" --create-namespace \
  -f "${VALUES}" "${IMAGE_VALUES[@]}" --set "images.builder.image=${BUILDER_IMAGE}" \
  --wait --timeout 5m
kubectl --namespace "${NAMESPACE}" rollout status "deployment/${FULLNAME}" --timeout 180s
kubectl --namespace "${NAMESPACE}" rollout status "deployment/${FULLNAME}-minio" --timeout 180s

# --- 4. the example job ----------------------------------------------------------------------
say "port-forwarding MinIO to 127.0.0.1:${MINIO_PORT}"
kubectl --namespace "${NAMESPACE}" port-forward "service/${FULLNAME}-minio" "${MINIO_PORT}:9000" \
  >/dev/null 2>&1 &
forward=$!
trap 'kill "${forward}" 2>/dev/null || true' EXIT
deadline=$((SECONDS + 60))
until curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:${MINIO_PORT}/minio/health/ready"; do
  [ "${SECONDS}" -lt "${deadline}" ] || die "MinIO did not answer on 127.0.0.1:${MINIO_PORT} within 60s"
  kill -0 "${forward}" 2>/dev/null || die "kubectl port-forward exited (is port ${MINIO_PORT} in use? set MINIO_PORT)"
  sleep 1
done

secret() {
  kubectl --namespace "${NAMESPACE}" get secret "${FULLNAME}-storage" -o "jsonpath={.data.$1}" | base64 -d
}
# The CLI's storage settings: the operator's bucket, which the CLI reaches through the
# port-forward and trial Pods at MinIO's Service (the RolloutJob's spec.storage gets the cluster
# endpoint and the Secret the Pods mount for credentials).
export ROLLOUT_STORAGE_BUCKET=rollout
export ROLLOUT_STORAGE_ENDPOINT="http://127.0.0.1:${MINIO_PORT}"
export ROLLOUT_STORAGE_CLUSTER_ENDPOINT="http://${FULLNAME}-minio.${NAMESPACE}.svc:9000"
export ROLLOUT_STORAGE_CREDENTIALS_SECRET="${FULLNAME}-storage"
export ROLLOUT_STORAGE_PATH_STYLE=true
export ROLLOUT_STORAGE_REGION=us-east-1
AWS_ACCESS_KEY_ID=$(secret AWS_ACCESS_KEY_ID)
AWS_SECRET_ACCESS_KEY=$(secret AWS_SECRET_ACCESS_KEY)
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY

say "publishing the example dataset examples/tasks (its digest is the one in examples/rolloutjob.yaml)"
rollout validate examples/job.yaml
rollout publish examples/tasks

say "running examples/job.yaml (the oracle agent on examples/tasks/hello-offline)"
rollout run examples/job.yaml --namespace "${NAMESPACE}"

# --- 5. an image built in the cluster ---------------------------------------------------------
say "running examples/build-job.yaml (its task's image is built in the cluster, pushed to ${REGISTRY})"
rollout run examples/build-job.yaml --namespace "${NAMESPACE}"

# --- 6. where the results are ----------------------------------------------------------------
say "done"
cat <<EOF
Results of the job "hello-offline":
  in the bucket:  s3://rollout/jobs/hello-offline/result.json
                  s3://rollout/jobs/hello-offline/oracle/tasks/hello-offline__1/ (result.json, logs/, setup/, command/)
  downloaded to:  ./jobs/hello-offline/ (job.yaml's jobs_dir)
  in the cluster: kubectl --namespace ${NAMESPACE} get rolloutjobs,rollouttrials
                  kubectl --namespace ${NAMESPACE} get rolloutjob hello-offline -o jsonpath='{.status.resultUri}'

Results of the job "hello-built", whose image was built in the cluster:
  in the bucket:  s3://rollout/jobs/hello-built/ (and builds/<hash>.log, the build's log)
  the image:      kubectl --namespace ${NAMESPACE} get rolloutimages
                  (run examples/build-job.yaml again: the registry has it, nothing is built)

The same dataset by content address, the GitOps way:
  kubectl --namespace ${NAMESPACE} apply -f examples/rolloutjob.yaml

To browse the bucket, keep a port-forward open and use any S3 client with the credentials in
Secret ${FULLNAME}-storage:
  kubectl --namespace ${NAMESPACE} port-forward service/${FULLNAME}-minio ${MINIO_PORT}:9000

Remove everything: kind delete cluster --name ${CLUSTER}; docker rm -f ${REGISTRY_NAME}
EOF
