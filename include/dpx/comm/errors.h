// The errors collectives raise; all of dpx's errors are declared in dpx/errors.h. This path is
// kept for programs that include it.
#pragma once

#include "dpx/errors.h"
