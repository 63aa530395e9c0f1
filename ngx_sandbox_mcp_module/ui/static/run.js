/* the run page */
"use strict";
