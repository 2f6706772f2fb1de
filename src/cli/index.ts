/**
 * The `waypoint` command line, run by bin/waypoint.js: importing this entry parses `process.argv`
 * and runs the command (main.ts). Nothing imports the CLI; it imports every other layer's entry.
 */
import './main.ts';
