/*
 * loss_scale.c - the dynamic loss scaler: Megatron-LM's DynamicGradScaler
 * (megatron/optimizer/grad_scaler.py), step for step.
 *
 *   overflow:  growth_tracker = 0; hysteresis_tracker -= 1;
 *              if hysteresis_tracker <= 0: scale = max(scale * backoff, min_scale)
 *   clean:     growth_tracker += 1;
 *              if growth_tracker == growth_interval:
 *                  growth_tracker = 0; hysteresis_tracker = hysteresis;
 *                  scale = scale * growth
 *
 * As in Megatron, a clean step does not restore the hysteresis count; only
 * a growth does, so `hysteresis` counts the overflows since the last growth
 * (not only consecutive ones), and once it is spent every further overflow
 * backs off (the count goes on below 0; here it stops at INT32_MIN).  The
 * scale has no upper bound.  Megatron keeps the scale in an fp32 tensor;
 * here it is a double, which gives the same values for the usual powers of
 * two.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "tierstore/kernels.h"

int tier_loss_scaler_init(struct tier_loss_scaler *s, double initial_scale, double min_scale,
			  double growth_factor, double backoff_factor, uint32_t growth_interval,
			  uint32_t hysteresis)
{
	TS_NONNULL(s);
	if (!s)
		return ts_err(-EINVAL, "loss scaler: NULL scaler");
	if (!(isfinite(initial_scale) && initial_scale > 0.0))
		return ts_err(-EINVAL, "loss scaler: initial_scale %g is not finite and > 0",
				initial_scale);
	if (!(isfinite(min_scale) && min_scale > 0.0))
		return ts_err(-EINVAL, "loss scaler: min_scale %g is not finite and > 0", min_scale);
	if (min_scale > initial_scale)
		return ts_err(-EINVAL, "loss scaler: min_scale %g is above initial_scale %g",
				min_scale, initial_scale);
	if (!(isfinite(growth_factor) && growth_factor > 1.0))
		return ts_err(-EINVAL, "loss scaler: growth_factor %g is not finite and > 1",
				growth_factor);
	if (!(backoff_factor > 0.0 && backoff_factor < 1.0))
		return ts_err(-EINVAL, "loss scaler: backoff_factor %g is not in (0, 1)",
				backoff_factor);
	if (growth_interval == 0)
		return ts_err(-EINVAL, "loss scaler: growth_interval is 0");
	if (hysteresis == 0 || hysteresis > INT32_MAX)
		return ts_err(-EINVAL, "loss scaler: hysteresis %u is not in [1, %d]",
				(unsigned)hysteresis, INT32_MAX);

	s->scale = initial_scale;
	s->min_scale = min_scale;
	s->growth_factor = growth_factor;
	s->backoff_factor = backoff_factor;
	s->growth_interval = growth_interval;
	s->hysteresis = hysteresis;
	s->growth_tracker = 0;
	s->hysteresis_tracker = (int32_t)hysteresis;
	ts_err_clear();
	return 0;
}

bool tier_loss_scaler_update(struct tier_loss_scaler *s, bool found_inf)
{
	TS_NONNULL_OR(s, false);
	if (found_inf) {
		s->growth_tracker = 0;
		if (s->hysteresis_tracker > INT32_MIN)
			s->hysteresis_tracker--;
		if (s->hysteresis_tracker <= 0) {
			double backed = s->scale * s->backoff_factor;

			s->scale = backed > s->min_scale ? backed : s->min_scale;
		}
		return true;
	}
	s->growth_tracker++;
	if (s->growth_tracker == s->growth_interval) {
		s->growth_tracker = 0;
		s->hysteresis_tracker = (int32_t)s->hysteresis;
		s->scale = s->scale * s->growth_factor;
	}
	return false;
}
