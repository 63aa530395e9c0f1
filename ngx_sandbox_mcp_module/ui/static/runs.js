/* the run list */
"use strict";
