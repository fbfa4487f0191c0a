// Step deadlines that grow with the step (see runtime/cluster.h): the
// configured deadline is the floor, and a step predicted to take long gets
// RG_CLUSTER_DEADLINE_FACTOR times its prediction. The prediction is the
// run's own: the step's FLOPs and bytes at the best pace the run's earlier
// steps have shown for each.
#include <math.h>
#include <stdio.h>

#include "runtime/cluster.h"

void rg_cluster_pace_add(rg_cluster_pace_t *p, double flops, double bytes, double seconds) {
  if (!(seconds > 0) || !isfinite(seconds)) return;
  // A step bound by compute shows the pace of its FLOPs, one bound by
  // memory that of its bytes; neither is faster than the best step shows,
  // so the best of each is what a prediction may count on.
  if (flops > 0) {
    double f = seconds / flops;
    if (!(p->s_per_flop > 0) || f < p->s_per_flop) p->s_per_flop = f;
  }
  if (bytes > 0) {
    double b = seconds / bytes;
    if (!(p->s_per_byte > 0) || b < p->s_per_byte) p->s_per_byte = b;
  }
  p->steps++;
}

double rg_cluster_pace_predict(const rg_cluster_pace_t *p, double flops, double bytes) {
  double tf = p->s_per_flop > 0 && flops > 0 ? flops * p->s_per_flop : 0;
  double tb = p->s_per_byte > 0 && bytes > 0 ? bytes * p->s_per_byte : 0;
  return tf > tb ? tf : tb;
}

rg_cluster_deadline_t rg_cluster_step_deadline(double floor_s, double predicted_s) {
  rg_cluster_deadline_t d = {floor_s, floor_s, predicted_s > 0 ? predicted_s : 0, 0};
  double scaled = RG_CLUSTER_DEADLINE_FACTOR * d.predicted_s;
  if (scaled > floor_s) d.seconds = scaled, d.scaled = 1;
  return d;
}

const char *rg_cluster_deadline_describe(const rg_cluster_deadline_t *d, char *buf, size_t len) {
  if (d->scaled)
    snprintf(buf, len,
             "the step deadline: %.0f x the %.3g s this step is predicted to take from the run's "
             "earlier steps, above the configured %.3g s",
             RG_CLUSTER_DEADLINE_FACTOR, d->predicted_s, d->floor_s);
  else if (d->predicted_s > 0)
    snprintf(buf, len,
             "the step deadline: the configured %.3g s (--step-timeout), the floor; %.0f x the "
             "%.3g s this step is predicted to take is less",
             d->floor_s, RG_CLUSTER_DEADLINE_FACTOR, d->predicted_s);
  else
    snprintf(buf, len,
             "the step deadline: the configured %.3g s (--step-timeout); no earlier step to "
             "predict this one from",
             d->floor_s);
  return buf;
}
