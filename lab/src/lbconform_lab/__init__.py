"""lbconform-lab: the hermetic lab cluster (control plane, nodes, kube-proxy, images), its
reference load balancer with named defects, and MetalLB and kube-vip as upstream ships them. It
depends on the harness (lbconform) and plugs into it through entry points; the harness never
imports it."""
