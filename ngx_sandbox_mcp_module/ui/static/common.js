/* shared helpers of the dashboard pages */
"use strict";
