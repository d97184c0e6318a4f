/* Every CPU test: TEST_ENTRY(name, timeout_seconds), one list per area in
 * tests/list-<area>.h.  ctest reads those files (tests/CMakeLists.txt); each
 * test's body is TEST_IMPL(name) in one of the tests/test-<area>.c files. */
#include "list-core.h"
#include "list-errors.h"
#include "list-store.h"
#include "list-launcher.h"
#include "list-fdx.h"
#include "list-ranks.h"
#include "list-bench.h"
#include "list-coll.h"
#include "list-signal.h"
#include "list-seam.h"
#include "list-settings.h"
#include "list-deadline.h"
#include "list-faults.h"
#include "list-wire.h"
#include "list-soak.h"
#include "list-identity.h"
