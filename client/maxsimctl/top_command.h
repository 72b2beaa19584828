// maxsimctl top: a live view of a server's /metrics (Prometheus text,
// fetched over plain HTTP): requests/s, errors, latency quantiles, queue
// depth, rejections and the stage breakdown.
//
// Thread-safety: runs on maxsimctl's one thread.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_TOP_COMMAND_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_TOP_COMMAND_H_

#include "client/maxsimctl/flags.h"

namespace maxsimd::ctl {

// Flags: metrics, interval, iterations, once, metrics-token-file. Exit 1 when
// a scrape fails or the endpoint is not maxsimd's.
int RunTop(const Globals& g, const Flags& f);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_TOP_COMMAND_H_
